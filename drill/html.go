package drill

import (
	_ "embed"
	"html/template"
	"io"
)

// reportHTML is the HTML report: one self-contained page (no scripts, no
// outside assets) a team can attach to a change request.
//
//go:embed report.html
var reportHTML string

var reportTmpl = template.Must(template.New("report").Parse(reportHTML))

func (rep *Report) writeHTML(w io.Writer) error { return reportTmpl.Execute(w, rep) }
