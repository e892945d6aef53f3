package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
)

// command is one sandboxctl command. Adding a command is one entry in
// commandTable and its run function.
type command struct {
	// name is what is typed ("exec").
	name string
	// synopsis is the arguments and flags after the name.
	synopsis string
	// summary says what it does (one or a few lines).
	summary string
	// examples are command lines with a comment each ("# ..." lines allowed).
	examples []string
	// run executes it with the arguments after the name.
	run func(context.Context, *cli, []string) int
}

// commandTable lists the commands in the order the usage shows them (set
// in init: the commands' help refers back to it).
var commandTable []command

func init() {
	commandTable = []command{
		{"list", "[--tenant TENANT] [--user USER] [--state running|dead|hibernated] [--metadata K=V]... [-o table|wide|json]",
			"list sandboxes (--metadata: only those with every pair; --json is -o json)",
			[]string{"sandboxctl list", "sandboxctl list --user alice -o json", "sandboxctl list --state dead --metadata team=ml"}, cmdList},
		{"inspect", "SANDBOX_ID", "print one sandbox as JSON",
			[]string{"sandboxctl inspect sb-q3x7kd2mf5a6bnp4hcw2"}, cmdInspect},
		{"kill", "SANDBOX_ID... | --user USER [--tenant TENANT]",
			"delete sandboxes (each is attempted), or all of a user's (in every tenant the token sees, unless --tenant)",
			[]string{"sandboxctl kill sb-q3x7kd2mf5a6bnp4hcw2 sb-7ryz2lnw4ks6tdm3vb5e", "sandboxctl kill --user alice"}, cmdKill},
		{"exec", "(--user USER [--from-snapshot SNAPSHOT] | --sandbox SANDBOX_ID | SANDBOX_ID) [--language python|bash|javascript|typescript|r] [--env NAME=VALUE]... [--timeout D] [--command-id ID] [--save DIR] [--events] [--network] [--allow DEST]... [--deny DEST]... [--rule DOMAIN:HEADER=VALUE]... [--public] [--policy-file FILE] [--volume VOLUME:/mnt/PATH[:ro]]... [--template TEMPLATE] CODE",
			"run CODE (\"-\" reads stdin) in a user's sandbox (acquired first) or in a sandbox by ID, and stream its output;\n" +
				"--network and the policy flags (as net set's) give a sandbox exec creates for --user its network;\n" +
				"--save DIR writes figures (PNG, JPEG, SVG, PDF) and plotly charts (self-contained HTML) there;\n" +
				"--events prefixes each event with its seq (for resume --after-seq);\n" +
				"--volume mounts a volume (see volume) in a sandbox exec creates for --user;\n" +
				"--template creates that sandbox from a template (see template)",
			[]string{"sandboxctl exec --user alice 'print(6 * 7)'",
				"sandboxctl exec --sandbox sb-q3x7kd2mf5a6bnp4hcw2 --language bash 'ls -l'",
				"sandboxctl exec sb-q3x7kd2mf5a6bnp4hcw2 'print(x)'   # the same: a sandbox ID first",
				"echo 'import this' | sandboxctl exec --user alice -",
				"sandboxctl exec --user alice --save ./figs 'import matplotlib.pyplot as plt; plt.plot([1, 4, 9]); plt.show()'",
				"sandboxctl exec --user alice --command-id job-1 --events 'for i in range(3): print(i)'",
				"sandboxctl exec --user bob --deny 0.0.0.0/0 --allow pypi.org --allow files.pythonhosted.org --language bash 'pip install requests'",
				"sandboxctl exec --user carol --volume datasets:/mnt/datasets:ro --volume scratch:/data/scratch --language bash 'ls /mnt/datasets'"}, cmdExec},
		{"run", "[--language python|bash|javascript|typescript|r] [--env NAME=VALUE]... [--timeout D] [--from-snapshot SNAPSHOT] [--template TEMPLATE] [--network] [--save DIR] [--events] CODE",
			"run CODE (\"-\" reads stdin) once in a sandbox of its own, from the warm pool, and stream its output;\n" +
				"the sandbox is deleted when the command ends (or on Ctrl-C): no user, no state kept;\n" +
				"--env sets the sandbox's environment; --save and --events as for exec",
			[]string{"sandboxctl run 'print(6 * 7)'",
				"sandboxctl run --language bash --env MODE=ci 'echo $MODE; uname -a'",
				"sandboxctl run --from-snapshot base 'print(df.describe())'"}, cmdRun},
		{"resume", "SANDBOX_ID COMMAND_ID [--after-seq N] [--save DIR] [--events]",
			"stream a command's output (again), after event N (exec --events and resume --events show the seqs)",
			[]string{"sandboxctl resume sb-q3x7kd2mf5a6bnp4hcw2 job-1", "sandboxctl resume sb-q3x7kd2mf5a6bnp4hcw2 job-1 --after-seq 2 --events"}, cmdResume},
		{"ls", "SANDBOX_ID [PATH] [--depth N] [-o table|json]",
			"list a directory of the sandbox's /workspace (N levels, 1-10)",
			[]string{"sandboxctl ls sb-q3x7kd2mf5a6bnp4hcw2", "sandboxctl ls sb-q3x7kd2mf5a6bnp4hcw2 data --depth 2 -o json"}, cmdLs},
		{"cp", "SANDBOX_ID:PATH LOCAL | LOCAL SANDBOX_ID:PATH",
			"copy a file out of the sandbox's /workspace, or into it (LOCAL \"-\" is stdout or stdin;\n" +
				"a LOCAL directory takes the file's name)",
			[]string{"sandboxctl cp sb-q3x7kd2mf5a6bnp4hcw2:results/out.csv .", "sandboxctl cp data.csv sb-q3x7kd2mf5a6bnp4hcw2:input/data.csv",
				"sandboxctl cp sb-q3x7kd2mf5a6bnp4hcw2:report.txt - | less"}, cmdCp},
		{"mkdir", "[-p] SANDBOX_ID PATH", "create a directory in /workspace (-p: parents, no error if it exists)",
			[]string{"sandboxctl mkdir -p sb-q3x7kd2mf5a6bnp4hcw2 data/raw"}, cmdMkdir},
		{"rm", "[-r] SANDBOX_ID PATH", "remove a file or (-r: with its content) a directory from /workspace",
			[]string{"sandboxctl rm sb-q3x7kd2mf5a6bnp4hcw2 old.csv", "sandboxctl rm -r sb-q3x7kd2mf5a6bnp4hcw2 data/tmp"}, cmdRm},
		{"mv", "[-f] SANDBOX_ID FROM TO", "rename within /workspace (-f: replace an existing destination)",
			[]string{"sandboxctl mv sb-q3x7kd2mf5a6bnp4hcw2 draft.txt final.txt"}, cmdMv},
		{"ps", "SANDBOX_ID [--limit N] [-o table|json]",
			"list the sandbox's commands, newest first (N, default 50; 0: all)",
			[]string{"sandboxctl ps sb-q3x7kd2mf5a6bnp4hcw2", "sandboxctl ps sb-q3x7kd2mf5a6bnp4hcw2 --limit 0 -o json"}, cmdPs},
		{"top", "[SANDBOX_ID] [--interval D] [--once]",
			"show each sandbox's CPU, memory, disk, processes and network (or one sandbox's) from sandboxd's samples, refreshed every D (5s) until interrupted; --once: one table",
			[]string{"sandboxctl top", "sandboxctl top sb-q3x7kd2mf5a6bnp4hcw2 --once"}, cmdTop},
		{"set-timeout", "SANDBOX_ID DURATION",
			"set the sandbox's idle timeout (e.g. 2h): it expires DURATION after its last use, counted from now",
			[]string{"sandboxctl set-timeout sb-q3x7kd2mf5a6bnp4hcw2 2h"}, cmdSetTimeout},
		{"ctx", "create SANDBOX_ID [--language LANG] [--cwd DIR] | ls SANDBOX_ID [-o table|json] | restart SANDBOX_ID CONTEXT_ID | rm SANDBOX_ID CONTEXT_ID",
			"manage contexts: create one (own interpreter and globals, cwd DIR under /workspace) and print its ID,\n" +
				"list them, give one fresh globals, delete one",
			[]string{"sandboxctl ctx create sb-q3x7kd2mf5a6bnp4hcw2 --language python --cwd project", "sandboxctl ctx ls sb-q3x7kd2mf5a6bnp4hcw2",
				"sandboxctl ctx restart sb-q3x7kd2mf5a6bnp4hcw2 ctx-1"}, cmdCtx},
		{"hibernate", "SANDBOX_ID...",
			"hibernate sandboxes now: globals saved, container removed, files kept; their next use wakes them",
			[]string{"sandboxctl hibernate sb-q3x7kd2mf5a6bnp4hcw2"}, cmdHibernate},
		{"wake", "SANDBOX_ID...", "wake hibernated sandboxes and print how their state came back",
			[]string{"sandboxctl wake sb-q3x7kd2mf5a6bnp4hcw2"}, cmdWake},
		{"snapshot", "create SANDBOX_ID [--name NAME] [-o json] | ls [--sandbox SANDBOX_ID] [-o table|json] | rm SNAPSHOT",
			"save a running sandbox's globals and /workspace as a snapshot of its tenant (it keeps running), list them, delete one;\n" +
				"exec --user U --from-snapshot SNAPSHOT (or AcquireSandbox options.from_snapshot) starts a new sandbox from one",
			[]string{"sandboxctl snapshot create sb-q3x7kd2mf5a6bnp4hcw2 --name before-refactor", "sandboxctl snapshot ls",
				"sandboxctl snapshot rm before-refactor"}, cmdSnapshot},
		{"volume", "create NAME [--size SIZE] [-o json] | ls [--tenant TENANT] [-o table|json] | get VOLUME | rm VOLUME [--force] | " +
			"cp VOLUME:PATH LOCAL | cp [--overwrite] LOCAL VOLUME:PATH | files VOLUME [PATH] [--depth N] [-o table|json] | mkdir [-p] VOLUME PATH | rmfile [-r] VOLUME PATH",
			"manage named volumes of the tenant (they outlive sandboxes; exec --volume mounts one): create one (SIZE such as 2GiB),\n" +
				"list them, print one as JSON, delete one (--force: even while sandboxes mount it); and their files without a sandbox,\n" +
				"as cp, ls, mkdir and rm do in /workspace (paths relative to the volume's root)",
			[]string{"sandboxctl volume create datasets --size 5GiB", "sandboxctl volume ls",
				"sandboxctl volume cp train.csv datasets:raw/train.csv", "sandboxctl volume files datasets raw --depth 2",
				"sandboxctl volume cp datasets:raw/train.csv -", "sandboxctl volume rmfile -r datasets raw", "sandboxctl volume rm datasets"}, cmdVolume},
		{"template", "build -f SPEC.yaml [--force] NAME | ls [--tenant TENANT] [-o table|json] | get TEMPLATE | rm TEMPLATE | logs TEMPLATE [--version N]",
			"manage the tenant's templates (their own sandbox images; exec --template creates a sandbox from one): build one from a\n" +
				"YAML spec (base, then steps: apt, copy, env, workdir, user, run; a copy's src, relative to the spec, is packed and\n" +
				"uploaded) and print its log as it builds, list them, print one as JSON, delete one, print a build's log",
			[]string{"sandboxctl template build -f tools.yaml tools", "sandboxctl template ls",
				"sandboxctl template logs tools --version 2", "sandboxctl exec --user alice --template tools --language bash 'jq --version'",
				"sandboxctl template rm tools"}, cmdTemplate},
		{"fork", "SANDBOX_ID [--count N] [--user USER]...",
			"make N copies (1 to 20) of a running sandbox's state, each a new sandbox of its own user; print each fork, or why it failed",
			[]string{"sandboxctl fork sb-q3x7kd2mf5a6bnp4hcw2 --count 3", "sandboxctl fork sb-q3x7kd2mf5a6bnp4hcw2 --user branch-a --user branch-b"}, cmdFork},
		{"net", "SANDBOX_ID [-o table|json] | set SANDBOX_ID [--allow DEST]... [--deny DEST]... [--rule DOMAIN:HEADER=VALUE]... [--public] [--policy-file FILE] | host SANDBOX_ID PORT",
			"show a networked sandbox's egress policy, counters and recent denials (why a download failed);\n" +
				"set replaces its policy whole (allowed beats denied; --deny 0.0.0.0/0 with --allow is an allow-list;\n" +
				"a rule's header is set by the egress gateway on HTTPS requests to DOMAIN and never enters the sandbox);\n" +
				"host prints the URL of a port and the traffic token it needs",
			[]string{"sandboxctl net sb-q3x7kd2mf5a6bnp4hcw2",
				"sandboxctl net set sb-q3x7kd2mf5a6bnp4hcw2 --deny 0.0.0.0/0 --allow pypi.org --allow files.pythonhosted.org",
				"sandboxctl net set sb-q3x7kd2mf5a6bnp4hcw2 --allow api.example.com --rule 'api.example.com:Authorization=Bearer KEY'",
				"sandboxctl net set sb-q3x7kd2mf5a6bnp4hcw2 --policy-file policy.json   # secrets kept out of ps",
				"sandboxctl net host sb-q3x7kd2mf5a6bnp4hcw2 8080"}, cmdNet},
		{"audit", "[--sandbox ID] [--action A] [--tenant T] [--since D] [--limit N] [-o table|json]",
			"print the audit trail, oldest first: who (tenant, token name) did what to which sandbox, and how it ended;\n" +
				"the newest N (default 100; 0: all) of the events since D (default 24h; 0: all). A user token sees its tenant's only",
			[]string{"sandboxctl audit --sandbox sb-q3x7kd2mf5a6bnp4hcw2", "sandboxctl audit --action delete --since 168h",
				"sandboxctl audit --tenant acme --since 2026-01-02T00:00:00Z --limit 0 -o json"}, cmdAudit},
	}
}

// lookup finds a command by name.
func lookup(name string) (command, bool) {
	for _, c := range commandTable {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

const globalFlags = `Global flags:
  --addr ADDR            sandboxd's gRPC address (env SANDBOXCTL_ADDR; default 127.0.0.1:50051)
  --token TOKEN          bearer token for a sandboxd started with --auth-tokens
                         (env SANDBOXCTL_TOKEN; prefer the variable: arguments show in ps)
  --tls                  connect with TLS, verifying the server against the system's CAs
  --ca FILE              connect with TLS, verifying the server against this CA (PEM); implies --tls
`

// writeUsage prints the global usage: every command with its summary.
func writeUsage(w io.Writer) {
	var b strings.Builder
	b.WriteString("Usage: sandboxctl [--addr ADDR] [--token TOKEN] [--tls] [--ca FILE] COMMAND [ARGS]\n\nCommands:\n")
	for _, c := range commandTable {
		fmt.Fprintf(&b, "  %s %s\n                         %s\n", c.name, c.synopsis, strings.ReplaceAll(c.summary, "\n", "\n                         "))
	}
	b.WriteString("\nRun \"sandboxctl help COMMAND\" (or COMMAND --help) for a command's arguments and examples.\n\n")
	b.WriteString(globalFlags)
	io.WriteString(w, b.String())
}

// writeCommandHelp prints one command's synopsis, summary and examples.
func writeCommandHelp(w io.Writer, c command) {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: sandboxctl %s %s\n\n%s\n", c.name, c.synopsis, c.summary)
	if len(c.examples) > 0 {
		b.WriteString("\nExamples:\n")
		for _, e := range c.examples {
			fmt.Fprintf(&b, "  %s\n", e)
		}
	}
	b.WriteString("\n")
	b.WriteString(globalFlags)
	io.WriteString(w, b.String())
}

// suggest returns the commands a mistyped name was probably meant to be:
// those within an edit or two (one for short names; swapping two letters
// is one edit), or that it is a prefix of.
func suggest(name string) []string {
	limit := 2
	if len(name) <= 4 {
		limit = 1
	}
	var out []string
	for _, c := range commandTable {
		if editDistance(name, c.name) <= limit || (len(name) >= 2 && strings.HasPrefix(c.name, name)) {
			out = append(out, c.name)
		}
	}
	sort.Strings(out)
	return out
}

// editDistance is the optimal string alignment distance between two short
// strings: insertions, deletions, substitutions and swaps of adjacent
// letters.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// wantsHelp says the arguments ask for help (-h, -help, --help) before any
// "--".
func wantsHelp(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if a == "-h" || a == "-help" || a == "--help" {
			return true
		}
	}
	return false
}
