package main

import (
	"fmt"
	"os"
	"slices"
	"strings"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/store/embedded"
)

// The `store` command: `idemgate store check DIR` reads every file of an
// embedded store's DIR that its database uses (with its gateway stopped)
// and says what is damaged. Exit status 0: sound; 1: damage found; 2: it
// could not check; 3: no damage, but the next start drops the last write
// before a crash (an unreadable last log entry, cut short or damaged).
func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "store",
		Usage: "check <DIR>",
		Short: "Checks an embedded idempotency store for damage",
		Long: `
Commands for the embedded idempotency store (store embedded [DIR]).

check DIR reads every file of DIR the database uses: the deployment
secret's checksum, the database's manifest and write-ahead log (by opening
it read-only), every block checksum of every table the manifest lists, and
every record, and says what is damaged, naming the file. A table the
manifest does not list is the leftover of a flush or compaction a crash
interrupted: noted, not damage. An unreadable last entry of the newest log
(a write a crash cut short, or a damaged byte: the two read alike) is
reported as WARNING: the next start drops it. It changes nothing. Stop the
gateway that owns DIR first.
Exit status: 0 sound, 1 damage found (DAMAGED lines), 2 the check could not
run, 3 no damage but the last write before a crash is dropped (WARNING).
`,
		CobraFunc: func(cmd *cobra.Command) {
			cmd.AddCommand(&cobra.Command{
				Use:   "check <DIR>",
				Short: "Reports what is damaged in an embedded store's DIR",
				Args:  cobra.ExactArgs(1),
				RunE: func(cmd *cobra.Command, args []string) error {
					os.Exit(storeCheck(args[0]))
					return nil
				},
			})
		},
	})
}

// storeCheck runs embedded.Check on dir and prints its report.
func storeCheck(dir string) int {
	rep, err := embedded.Check(dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "idemgate store check: %v\n", err)
		return 2
	}
	states := make([]string, 0, len(rep.Records))
	total := 0
	for st, n := range rep.Records {
		states = append(states, fmt.Sprintf("%s %d", st, n))
		total += n
	}
	slices.Sort(states)
	fmt.Printf("%s: %d live records (%s), %d tables read\n", rep.Dir, total, strings.Join(states, ", "), rep.Tables)
	for _, n := range rep.Notes {
		fmt.Printf("note: %s\n", n)
	}
	for _, d := range rep.Dropped {
		fmt.Printf("WARNING: %s\n", d)
	}
	switch {
	case len(rep.Damage) > 0:
		for _, d := range rep.Damage {
			fmt.Printf("DAMAGED: %s\n", d)
		}
		return 1
	case len(rep.Dropped) > 0:
		fmt.Println("no damage found, but the last write before the crash is dropped (WARNING above)")
		return 3
	}
	fmt.Println("no damage found")
	return 0
}
