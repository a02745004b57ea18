package routematch

import (
	"net/http/httptest"
	"testing"
)

// TestNormalisePath pins the path normalisation table.
func TestNormalisePath(t *testing.T) {
	for in, want := range map[string]string{
		"/crm/deals":              "/crm/deals",
		"/crm/deals/":             "/crm/deals",
		"/":                       "/",
		"":                        "/",
		"/CRM/Deals":              "/crm/deals",
		"/crm/deals;jsessionid=1": "/crm/deals",
		"/crm;a=b/deals;c":        "/crm/deals",
		"/crm//deals":             "/crm/deals",
		"/crm/../deals":           "/deals",
		"/crm/deals//":            "/crm/deals",
		"/a;b/":                   "/a",
	} {
		if got := Normalise(in); got != want {
			t.Errorf("Normalise(%q) = %q, want %q", in, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { Normalise("/crm/deals") }); n != 0 {
		t.Errorf("a normal path allocates %v times", n)
	}
}

// TestMatch: the first route whose methods and path match the normalised
// request, and the target its wildcards matched.
func TestMatch(t *testing.T) {
	tbl, err := New([]Rule{
		{Methods: []string{"POST"}, Path: "/crm/deals"},
		{Methods: []string{"post", "PUT"}, Path: "/orders/*/refund"},
		{Methods: []string{"DELETE", "GET"}, Path: "/crm/*"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		method, path string
		want         int
		target       string
	}{
		{"POST", "/crm/deals", 0, ""},
		{"post", "/CRM/deals/", 0, ""},
		{"POST", "/crm/deals;x=1", 0, ""},
		{"PUT", "/orders/7/refund", 1, "7/"}, // the wildcard segments, as matched
		{"POST", "/orders/7/refund/x", -1, ""},
		{"DELETE", "/crm/deals", 2, "deals"},
		{"GET", "/crm/deals", -1, ""}, // safe methods are never guarded
		{"PATCH", "/crm/deals", -1, ""},
	} {
		i, target := tbl.Match(httptest.NewRequest(tt.method, "http://x"+tt.path, nil))
		if i != tt.want || (i >= 0 && target != tt.target) {
			t.Errorf("%s %s: route %d target %q, want %d %q", tt.method, tt.path, i, target, tt.want, tt.target)
		}
	}
	var re *Error
	if _, err := New([]Rule{{Path: "/a"}, {Path: "/b/[x"}}); err == nil || !asError(err, &re) || re.Index != 1 {
		t.Errorf("a bad pattern: %v, want an *Error naming rule 1", err)
	}
}

func asError(err error, re **Error) bool {
	e, ok := err.(*Error)
	*re = e
	return ok
}
