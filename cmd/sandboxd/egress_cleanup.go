package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/sandboxd/sandboxd/orchestrator/backend/docker"
)

// egressUsage is the egress subcommand's synopsis.
const egressUsage = "sandboxd egress cleanup [--instance NAME]"

// egressCommand runs `sandboxd egress cleanup`: it removes what a stopped
// sandboxd's egress networking left on the host (docker.CleanupEgress:
// its sandboxes' host ends, its bridge, its nftables table), which
// sandboxd itself leaves in place when it exits, so that its sandboxes
// stay isolated. It refuses while that instance runs. cleanup is
// docker.CleanupEgress; tests substitute it.
func egressCommand(args []string, stdout, stderr io.Writer, cleanup func(instance string) ([]string, error)) error {
	if len(args) == 0 || args[0] != "cleanup" {
		fmt.Fprintf(stderr, "Usage: %s\n", egressUsage)
		if len(args) == 0 {
			return usageError{errors.New("egress: missing subcommand")}
		}
		return usageError{fmt.Errorf("egress: unknown subcommand %q", args[0])}
	}
	fs := flag.NewFlagSet("sandboxd egress cleanup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	instance := fs.String("instance", "", "the --egress-instance `NAME` the stopped sandboxd ran with (empty: the default instance, bridge sandboxd0, table inet sandboxd, interfaces sbx-*)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: %s\n\nRemoves what a stopped sandboxd's egress networking left on the host: its sandboxes'\nhost-side interfaces, its bridge and its nftables table. Refused while that sandboxd runs.\nIts sandboxes, if still running, lose their network until it starts again.\n\nFlags:\n", egressUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errHelp
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("egress cleanup: unexpected argument %q", fs.Arg(0))}
	}
	if *instance != "" {
		if err := docker.CheckEgressInstance(*instance); err != nil {
			return usageError{fmt.Errorf("--instance %q: want 1 to 4 lower-case letters and digits", *instance)}
		}
	}
	removed, err := cleanup(*instance)
	for _, r := range removed {
		fmt.Fprintln(stdout, "removed", r)
	}
	if err != nil {
		return fmt.Errorf("egress cleanup: %w", err)
	}
	if len(removed) == 0 {
		fmt.Fprintln(stdout, "nothing to remove")
	}
	return nil
}
