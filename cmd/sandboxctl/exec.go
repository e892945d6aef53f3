package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"time"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/termsafe"
)

// interruptTimeout bounds the InterruptCommand sent when the user presses
// Ctrl-C during exec or resume.
const interruptTimeout = 5 * time.Second

// cmdExec acquires the user's sandbox, runs code in it and streams the
// output. The status is non-zero unless the command ended OK.
func cmdExec(ctx context.Context, c *cli, args []string) int {
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	user := fs.String("user", "", "the end user whose sandbox runs the code (acquired first)")
	sandboxID := fs.String("sandbox", "", "the sandbox that runs the code, by ID (instead of --user)")
	var out outputFlags
	out.register(fs)
	lang := fs.String("language", "python", "python, bash, javascript, typescript, r or java")
	timeout := fs.Duration("timeout", 0, "the command's wall-clock limit (0: the server's default)")
	cmdID := fs.String("command-id", "", "idempotency key; re-running with the same ID replays that command's output instead of running again")
	env := envFlag{}
	fs.Var(env, "env", "NAME=VALUE set for this command only (repeatable)")
	fromSnapshot := fs.String("from-snapshot", "", "a sandbox exec creates for --user starts from this snapshot (ID or name): its globals and /workspace")
	var volumes volumeList
	fs.Var(&volumes, "volume", "a sandbox exec creates for --user mounts this volume: VOLUME:/mnt/PATH[:ro] (repeatable; under /mnt or /data)")
	template := fs.String("template", "", "a sandbox exec creates for --user runs this template's image (ID or name; see template)")
	network := fs.Bool("network", false, "a sandbox exec creates for --user gets network access (under sandboxd's default policy unless the policy flags give one)")
	var pf policyFlags
	pf.register(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return usageErr(c.stderr, "exec", err)
	}
	if *sandboxID == "" && len(pos) == 2 && looksLikeSandboxID(pos[0]) {
		*sandboxID, pos = pos[0], pos[1:] // "exec SANDBOX_ID CODE"
	}
	switch {
	case *user == "" && *sandboxID == "":
		return usageErr(c.stderr, "exec", errors.New("say whose sandbox runs the code: --user USER, or --sandbox SANDBOX_ID"))
	case *user != "" && *sandboxID != "":
		return usageErr(c.stderr, "exec", errors.New("--user and --sandbox are exclusive"))
	case len(pos) != 1:
		return usageErr(c.stderr, "exec", fmt.Errorf("want exactly one CODE argument (or - for stdin), got %d", len(pos)))
	case *timeout < 0:
		return usageErr(c.stderr, "exec", fmt.Errorf("--timeout %v is negative", *timeout))
	case pf.file == "-" && len(pos) == 1 && pos[0] == "-":
		return usageErr(c.stderr, "exec", errors.New("the code and --policy-file cannot both be read from stdin"))
	case *sandboxID != "" && (*network || pf.set()):
		return usageErr(c.stderr, "exec", errors.New("--network and the policy flags apply to the sandbox exec acquires for --user; change a sandbox's policy with net set"))
	}
	var acquireOpts []client.AcquireOption
	if pf.set() {
		p, err := pf.policy(c.stdin)
		if err != nil {
			return usageErr(c.stderr, "exec", err)
		}
		acquireOpts = append(acquireOpts, client.WithNetworkPolicy(p))
	} else if *network {
		acquireOpts = append(acquireOpts, client.WithNetwork())
	}
	if *fromSnapshot != "" {
		if *sandboxID != "" {
			return usageErr(c.stderr, "exec", errors.New("--from-snapshot applies to the sandbox exec acquires for --user"))
		}
		acquireOpts = append(acquireOpts, client.WithFromSnapshot(*fromSnapshot))
	}
	if len(volumes) > 0 {
		if *sandboxID != "" {
			return usageErr(c.stderr, "exec", errors.New("--volume applies to the sandbox exec acquires for --user"))
		}
		acquireOpts = append(acquireOpts, volumes...)
	}
	if *template != "" {
		if *sandboxID != "" {
			return usageErr(c.stderr, "exec", errors.New("--template applies to the sandbox exec acquires for --user"))
		}
		acquireOpts = append(acquireOpts, client.WithTemplate(*template))
	}
	if err := out.check(); err != nil {
		return usageErr(c.stderr, "exec", err)
	}
	code := pos[0]
	if code == "-" {
		b, err := io.ReadAll(c.stdin)
		if err != nil {
			return c.fail("exec: reading code from stdin", err)
		}
		code = string(b)
	}

	// Choosing the ID here rather than letting the server generate one means
	// the command can be interrupted or resumed even if the stream breaks
	// before its first event arrives.
	if *cmdID == "" {
		*cmdID = newCommandID()
	}

	sb := *sandboxID
	if sb == "" {
		rctx, cancel := rpcCtx(ctx)
		acq, err := c.sandboxd.Acquire(rctx, *user, acquireOpts...)
		cancel()
		if err != nil {
			return c.fail("exec: acquire sandbox for "+*user, err)
		}
		if !acq.Created && *fromSnapshot != "" {
			fmt.Fprintf(c.stderr, "sandboxctl: note: %s's sandbox %s exists already; --from-snapshot applies only to a new one\n", *user, termsafe.Field(acq.ID))
		} else if !acq.Created && *template != "" {
			fmt.Fprintf(c.stderr, "sandboxctl: note: %s's sandbox %s exists already; --template applies only to a new one\n", *user, termsafe.Field(acq.ID))
		} else if !acq.Created && len(volumes) > 0 {
			fmt.Fprintf(c.stderr, "sandboxctl: note: %s's sandbox %s exists already and keeps the volumes it was created with (sandboxctl inspect %s shows them)\n",
				*user, termsafe.Field(acq.ID), termsafe.Field(acq.ID))
		} else if !acq.Created && len(acquireOpts) > 0 {
			fmt.Fprintf(c.stderr, "sandboxctl: note: %s's sandbox %s exists already and keeps the network it was created with (sandboxctl net set %s changes its policy)\n",
				*user, termsafe.Field(acq.ID), termsafe.Field(acq.ID))
		}
		if acq.Created && acq.Woke != nil {
			fmt.Fprintf(c.stderr, "sandboxctl: started %s from snapshot %s: %s\n", termsafe.Field(acq.ID), *fromSnapshot, wakeSummary(acq.Woke))
		}
		if acq.StateLost {
			fmt.Fprintf(c.stderr, "sandboxctl: note: %s's previous sandbox %s died (%s); started %s, earlier variables and files are gone\n",
				*user, termsafe.Field(acq.ReplacedID), termsafe.Line(acq.ReplacedReason), termsafe.Field(acq.ID))
		}
		sb = acq.ID
	}

	// One Execute, not client.Run: a broken stream is reported with the
	// command to resume it, rather than retried behind the user's back.
	stream, err := c.sandboxd.Execute(ctx, client.Command{SandboxID: sb, ID: *cmdID, Language: *lang, Code: code, Timeout: *timeout, Env: env})
	if err != nil {
		return c.fail("exec", err)
	}
	return c.follow(ctx, "exec", sb, *cmdID, stream, true, out)
}

// sandboxIDForm is the form of sandboxd's sandbox IDs ("sb-" and 20
// characters of lowercase base32).
var sandboxIDForm = regexp.MustCompile(`^sb-[a-z2-7]{20}$`)

// looksLikeSandboxID says an argument is a sandbox ID rather than code.
func looksLikeSandboxID(s string) bool { return sandboxIDForm.MatchString(s) }

// outputFlags are exec's and resume's flags about how events are shown.
type outputFlags struct {
	save   string
	events bool
}

func (o *outputFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&o.save, "save", "", "write figures and plotly charts (self-contained HTML) to this directory")
	fs.BoolVar(&o.events, "events", false, "prefix each event with its seq, for resume --after-seq")
}

// check makes the save directory exists (creating it), so that a typo is
// an error before the command runs rather than after.
func (o *outputFlags) check() error {
	if o.save == "" {
		return nil
	}
	if err := os.MkdirAll(o.save, 0o755); err != nil {
		return fmt.Errorf("--save: %v", err)
	}
	return nil
}

// newCommandID returns a fresh command ID; a variable so tests can pin it.
var newCommandID = func() string {
	var b [8]byte
	rand.Read(b[:]) // never fails (crypto/rand panics instead)
	return "ctl-" + hex.EncodeToString(b[:])
}

// cmdResume streams a command's events after --after-seq.
func cmdResume(ctx context.Context, c *cli, args []string) int {
	fs := flag.NewFlagSet("resume", flag.ContinueOnError)
	after := fs.Int64("after-seq", 0, "skip the events up to and including this seq")
	var out outputFlags
	out.register(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return usageErr(c.stderr, "resume", err)
	}
	if len(pos) != 2 {
		return usageErr(c.stderr, "resume", fmt.Errorf("want SANDBOX_ID COMMAND_ID, got %d arguments", len(pos)))
	}
	if *after < 0 {
		return usageErr(c.stderr, "resume", fmt.Errorf("--after-seq %d is negative", *after))
	}
	if err := out.check(); err != nil {
		return usageErr(c.stderr, "resume", err)
	}
	stream, err := c.sandboxd.StreamCommand(ctx, pos[0], pos[1], *after)
	if err != nil {
		return c.fail("resume", err)
	}
	// Ctrl-C only stops following: like "logs -f", resume watches a
	// command that was started elsewhere.
	return c.follow(ctx, "resume", pos[0], pos[1], stream, false, out)
}

// follow prints a command's stream to its end and turns the outcome into an
// exit status. On a broken stream it says how to resume. On Ctrl-C, with
// interruptOnCancel it asks the sandbox to interrupt the command (which would
// otherwise keep running unseen, unlike code run in a terminal); without, it
// only stops following.
func (c *cli) follow(ctx context.Context, what, sandboxID, commandID string, stream *client.Stream, interruptOnCancel bool, out outputFlags) int {
	p := &eventPrinter{stdout: c.stdout, stderr: c.stderr, saveDir: out.save, seqs: out.events, commandID: commandID}
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if ctx.Err() != nil {
				if interruptOnCancel {
					return c.interrupt(sandboxID, commandID, p.lastSeq)
				}
				fmt.Fprintf(c.stderr, "sandboxctl: stopped following command %s after event %d; it keeps running\n", commandID, p.lastSeq)
				return exitInterrupted
			}
			c.fail(what, err)
			if commandID != "" && p.lastSeq > 0 {
				fmt.Fprintf(c.stderr, "sandboxctl: the command may still be running; follow it with: sandboxctl resume %s %s --after-seq %d\n", sandboxID, commandID, p.lastSeq)
			}
			return exitFailure
		}
		commandID = ev.CommandID // the server's, when it generated one
		p.print(ev)
	}

	if p.done == nil {
		fmt.Fprintf(c.stderr, "sandboxctl: %s: the stream ended before the command did; follow it with: sandboxctl resume %s %s --after-seq %d\n", what, sandboxID, commandID, p.lastSeq)
		return exitFailure
	}
	return c.ended(what, commandID, p.done)
}

// ended reports how a command ended and returns the exit status: OK for
// status ok, otherwise a failure with its status, exit code or reason.
func (c *cli) ended(what, commandID string, d *client.Done) int {
	if d.StateLost {
		fmt.Fprintf(c.stderr, "sandboxctl: note: the sandbox's Python state was lost: %s\n", termsafe.Line(d.Reason))
	}
	if d.Status == client.StatusOK {
		return exitOK
	}
	msg := fmt.Sprintf("sandboxctl: %s: command %s ended with status %s", what, commandID, termsafe.Field(string(d.Status)))
	r := d.Reason
	if d.ExitCode != nil {
		msg = fmt.Sprintf("sandboxctl: %s: command %s failed with exit code %d", what, commandID, *d.ExitCode)
		if r == fmt.Sprintf("exit status %d", *d.ExitCode) {
			r = "" // says nothing more
		}
	}
	if r != "" && !d.StateLost {
		msg += ": " + termsafe.Line(r)
	}
	fmt.Fprintln(c.stderr, msg)
	return exitFailure
}

// interrupt asks the sandbox to stop the command after the user's Ctrl-C.
func (c *cli) interrupt(sandboxID, commandID string, lastSeq int64) int {
	ctx, cancel := context.WithTimeout(context.Background(), interruptTimeout)
	defer cancel()
	if err := c.sandboxd.Interrupt(ctx, sandboxID, commandID); err != nil {
		fmt.Fprintf(c.stderr, "sandboxctl: interrupted, but could not interrupt command %s: %s\n", commandID, c.describe(err))
		return exitInterrupted
	}
	fmt.Fprintf(c.stderr, "sandboxctl: interrupted command %s; see how it ended with: sandboxctl resume %s %s --after-seq %d\n", commandID, sandboxID, commandID, lastSeq)
	return exitInterrupted
}

// cmdRun runs code once in a sandbox of its own (RunStateless), streams
// its output, and leaves nothing behind. The status is non-zero unless
// the command ended OK.
func cmdRun(ctx context.Context, c *cli, args []string) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var out outputFlags
	out.register(fs)
	lang := fs.String("language", "python", "python, bash, javascript, typescript, r or java")
	timeout := fs.Duration("timeout", 0, "the command's wall-clock limit (0: the server's default)")
	env := envFlag{}
	fs.Var(env, "env", "NAME=VALUE in the sandbox's environment (repeatable)")
	fromSnapshot := fs.String("from-snapshot", "", "start the sandbox from this snapshot (ID or name): its globals and /workspace")
	template := fs.String("template", "", "run the sandbox from this template's image (ID or name)")
	network := fs.Bool("network", false, "give the sandbox network access under sandboxd's default policy")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return usageErr(c.stderr, "run", err)
	}
	switch {
	case len(pos) != 1:
		return usageErr(c.stderr, "run", fmt.Errorf("want exactly one CODE argument (or - for stdin), got %d", len(pos)))
	case *timeout < 0:
		return usageErr(c.stderr, "run", fmt.Errorf("--timeout %v is negative", *timeout))
	}
	if err := out.check(); err != nil {
		return usageErr(c.stderr, "run", err)
	}
	var opts []client.AcquireOption
	if len(env) > 0 {
		opts = append(opts, client.WithEnv(env))
	}
	if *fromSnapshot != "" {
		opts = append(opts, client.WithFromSnapshot(*fromSnapshot))
	}
	if *template != "" {
		opts = append(opts, client.WithTemplate(*template))
	}
	if *network {
		opts = append(opts, client.WithNetwork())
	}
	code := pos[0]
	if code == "-" {
		b, err := io.ReadAll(c.stdin)
		if err != nil {
			return c.fail("run: reading code from stdin", err)
		}
		code = string(b)
	}
	p := &eventPrinter{stdout: c.stdout, stderr: c.stderr, saveDir: out.save, seqs: out.events}
	o, err := c.sandboxd.RunStateless(ctx, client.Stateless{Language: *lang, Code: code, Timeout: *timeout}, func(ev client.Event) {
		p.commandID = ev.CommandID
		p.print(ev)
	}, opts...)
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(c.stderr, "sandboxctl: interrupted; the run's sandbox is deleted with its command")
			return exitInterrupted
		}
		return c.fail("run", err)
	}
	return c.ended("run", p.commandID, o.Done)
}
