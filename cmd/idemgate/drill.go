package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/idemgate/idemgate/drill"
)

// The `drill` command: `idemgate drill [-yes] [-json FILE] [-html FILE]
// DRILLFILE` runs the drill file's scenarios against its API through a
// gateway and a fault proxy of its own (docs/drill.md).
func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "drill",
		Usage: "[-yes] [-json FILE] [-html FILE] <DRILLFILE>",
		Short: "Proves the guarantee on your own API: double delivery, parallel workers, a lost answer, a restart",
		Long: `
Runs the scenarios of a drill file (docs/drill.md) against a real API,
through a gateway this command starts itself (this binary, the drill
file's rules, a temporary embedded store or the drill file's Redis) and
a fault proxy of its own between that gateway and the API:
double_delivery, three_deliveries, parallel, upstream_down, invalid_field,
changed_payload, lost_answer, slow_upstream, gateway_restart. Each has its
expected business records and final state, written down before it runs.

It creates real records in the API: it prints the plan and runs only with
-yes or after "yes" is typed on a terminal. It sends only to the drill
file's URLs, and never prints or stores credentials.

-json FILE writes the report as JSON, -html FILE as a self-contained page.
Exit status: 0 every scenario held, 1 a scenario did not (more records
than expected, a count that cannot be trusted, a wrong answer), 2 the
drill could not run; 130 it was interrupted (SIGINT, SIGTERM): it then
stops its gateway and fault proxy, removes its temporary files and prints
what it had done.
`,
		CobraFunc: func(cmd *cobra.Command) {
			cmd.DisableFlagParsing = true
			cmd.RunE = func(cmd *cobra.Command, args []string) error {
				os.Exit(runDrill(args))
				return nil
			}
		},
	})
}

func runDrill(args []string) int {
	fs := flag.NewFlagSet("idemgate drill", flag.ContinueOnError)
	o := drill.Options{Stdin: os.Stdin, Out: os.Stdout, Err: os.Stderr, IsTTY: term.IsTerminal(int(os.Stdin.Fd()))}
	fs.BoolVar(&o.Yes, "yes", false, "run without asking")
	fs.StringVar(&o.JSON, "json", "", "write the report as JSON to `FILE`")
	fs.StringVar(&o.HTML, "html", "", "write the report as a self-contained HTML page to `FILE`")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: idemgate drill [-yes] [-json FILE] [-html FILE] DRILLFILE")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return drill.ExitCannot
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return drill.ExitCannot
	}
	o.File = fs.Arg(0)
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "idemgate drill: %v\n", err)
		return drill.ExitCannot
	}
	o.Gateway = exe
	// Interrupted, the drill stops what it started and exits 130
	// instead of dying with its gateway left running.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	o.Interrupt = sig
	return drill.Run(o)
}
