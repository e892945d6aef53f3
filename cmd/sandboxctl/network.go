package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/termsafe"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// cmdNet shows a networked sandbox's egress (net SANDBOX_ID), replaces its
// policy (net set) or prints a port's URL (net host).
func cmdNet(ctx context.Context, c *cli, args []string) int {
	if len(args) > 0 {
		switch args[0] {
		case "set":
			return cmdNetSet(ctx, c, args[1:])
		case "host":
			return cmdNetHost(ctx, c, args[1:])
		}
	}
	fs := flag.NewFlagSet("net", flag.ContinueOnError)
	var format formatFlag
	format.register(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return usageErr(c.stderr, "net", err)
	}
	if len(pos) != 1 {
		return usageErr(c.stderr, "net", fmt.Errorf("want SANDBOX_ID (or set SANDBOX_ID ..., host SANDBOX_ID PORT), got %d arguments", len(pos)))
	}
	rctx, cancel := rpcCtx(ctx)
	defer cancel()
	st, err := c.sandboxd.NetworkStatus(rctx, pos[0])
	if err != nil {
		return c.fail("net "+pos[0], err)
	}
	if format == "json" {
		err = writeJSON(c.stdout, st)
	} else {
		err = writeNetStatus(c.stdout, st)
	}
	if err != nil {
		return c.fail("net", err)
	}
	return exitOK
}

// cmdNetSet replaces a sandbox's policy with the one the flags build and
// prints it as sandboxd stored it (header values never come back).
func cmdNetSet(ctx context.Context, c *cli, args []string) int {
	fs := flag.NewFlagSet("net set", flag.ContinueOnError)
	var pf policyFlags
	pf.register(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return usageErr(c.stderr, "net set", err)
	}
	if len(pos) != 1 {
		return usageErr(c.stderr, "net set", fmt.Errorf("want SANDBOX_ID, got %d arguments", len(pos)))
	}
	p, err := pf.policy(c.stdin)
	if err != nil {
		return usageErr(c.stderr, "net set", err)
	}
	rctx, cancel := rpcCtx(ctx)
	defer cancel()
	sb, err := c.sandboxd.UpdateNetworkPolicy(rctx, pos[0], p)
	if err != nil {
		return c.fail("net set "+pos[0], err)
	}
	if err := writePolicy(c.stdout, sb.GetNetworkPolicy()); err != nil {
		return c.fail("net set", err)
	}
	return exitOK
}

// cmdNetHost prints the URL of a sandbox's port and the token it needs.
func cmdNetHost(ctx context.Context, c *cli, args []string) int {
	fs := flag.NewFlagSet("net host", flag.ContinueOnError)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return usageErr(c.stderr, "net host", err)
	}
	if len(pos) != 2 {
		return usageErr(c.stderr, "net host", fmt.Errorf("want SANDBOX_ID PORT, got %d arguments", len(pos)))
	}
	port, err := strconv.Atoi(pos[1])
	if err != nil || port < 1 || port > 65535 {
		return usageErr(c.stderr, "net host", fmt.Errorf("PORT %q: want a number from 1 to 65535", pos[1]))
	}
	rctx, cancel := rpcCtx(ctx)
	defer cancel()
	h, err := c.sandboxd.GetHost(rctx, pos[0], port)
	if err != nil {
		return c.fail("net host "+pos[0], err)
	}
	fmt.Fprintln(c.stdout, termsafe.Field(h.GetUrl()))
	if h.GetTokenRequired() {
		fmt.Fprintf(c.stdout, "%s: %s\n", termsafe.Field(h.GetTokenHeader()), termsafe.Field(h.GetTrafficToken()))
	}
	return exitOK
}

// policyFlags build a policy from the command line: exec's (for the
// sandbox it acquires) and net set's.
type policyFlags struct {
	allow, deny listFlag
	rules       ruleFlag
	public      bool
	file        string
}

func (pf *policyFlags) register(fs *flag.FlagSet) {
	pf.rules = ruleFlag{}
	fs.Var(&pf.allow, "allow", "allow_out entry: a domain (example.com, *.example.com), IP address or CIDR block (repeatable; allowed beats denied)")
	fs.Var(&pf.deny, "deny", "deny_out entry, as --allow (repeatable; --deny 0.0.0.0/0 with --allow makes an allow-list)")
	fs.Var(pf.rules, "rule", "DOMAIN:HEADER=VALUE: the egress gateway sets HEADER on HTTPS requests to DOMAIN (repeatable; values show in ps: put secrets in --policy-file)")
	fs.BoolVar(&pf.public, "public", false, "let the sandbox's port URLs answer without its traffic token")
	fs.StringVar(&pf.file, "policy-file", "", "a policy as JSON (sandbox.v1.NetworkPolicy: allow_out, deny_out, rules {DOMAIN: {headers {...}}}, allow_public_traffic; \"-\" reads stdin), which the other flags add to")
}

// set reports whether any flag was given.
func (pf *policyFlags) set() bool {
	return len(pf.allow) > 0 || len(pf.deny) > 0 || len(pf.rules) > 0 || pf.public || pf.file != ""
}

// policy builds the policy: the file's, then the flags'.
func (pf *policyFlags) policy(stdin io.Reader) (client.NetworkPolicy, error) {
	var p client.NetworkPolicy
	if pf.file != "" {
		var b []byte
		var err error
		if pf.file == "-" {
			b, err = io.ReadAll(io.LimitReader(stdin, 1<<20))
		} else {
			b, err = os.ReadFile(pf.file)
		}
		if err != nil {
			return p, fmt.Errorf("--policy-file: %v", err)
		}
		var pp sandboxv1.NetworkPolicy
		if err := protojson.Unmarshal(b, &pp); err != nil {
			return p, fmt.Errorf("--policy-file %s: not a NetworkPolicy in JSON: %v", pf.file, err)
		}
		p = client.PolicyFromProto(&pp)
	}
	p.AllowOut = append(p.AllowOut, pf.allow...)
	p.DenyOut = append(p.DenyOut, pf.deny...)
	for domain, headers := range pf.rules {
		if p.Rules == nil {
			p.Rules = map[string]map[string]string{}
		}
		if p.Rules[domain] == nil {
			p.Rules[domain] = map[string]string{}
		}
		maps.Copy(p.Rules[domain], headers)
	}
	p.AllowPublicTraffic = p.AllowPublicTraffic || pf.public
	return p, nil
}

// listFlag collects a repeated flag's values.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error {
	*l = append(*l, s)
	return nil
}

// ruleFlag collects repeated --rule DOMAIN:HEADER=VALUE flags (a domain
// holds no ':' and a header name neither ':' nor '=').
type ruleFlag map[string]map[string]string

func (r ruleFlag) String() string { return "" }

func (r ruleFlag) Set(s string) error {
	domain, hv, ok := strings.Cut(s, ":")
	header, value, ok2 := strings.Cut(hv, "=")
	if !ok || !ok2 || domain == "" || header == "" {
		return errors.New("want DOMAIN:HEADER=VALUE, e.g. api.example.com:Authorization=Bearer KEY")
	}
	if r[domain] == nil {
		r[domain] = map[string]string{}
	}
	r[domain][header] = value
	return nil
}

// writePolicy prints a policy as sandboxd returned it: entries, rules'
// domains with their header names (never values: sandboxd returns none).
func writePolicy(w io.Writer, p *sandboxv1.NetworkPolicy) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "allow_out:\t%s\n", joinOrDash(fields(p.GetAllowOut())))
	fmt.Fprintf(tw, "deny_out:\t%s\n", joinOrDash(fields(p.GetDenyOut())))
	var rules []string
	for _, d := range slices.Sorted(maps.Keys(p.GetRules())) {
		headers := fields(slices.Sorted(maps.Keys(p.GetRules()[d].GetHeaders())))
		rules = append(rules, fmt.Sprintf("%s (%s)", termsafe.Field(d), strings.Join(headers, ", ")))
	}
	fmt.Fprintf(tw, "rules:\t%s\n", joinOrDash(rules))
	public := "no: port URLs need the traffic token"
	if p.GetAllowPublicTraffic() {
		public = "yes: port URLs answer without a token"
	}
	fmt.Fprintf(tw, "public traffic:\t%s\n", public)
	return tw.Flush()
}

func joinOrDash(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, " ")
}

// fields escapes each of a policy's entries (termsafe.Field): they are as
// a tenant wrote them.
func fields(s []string) []string {
	e := make([]string, len(s))
	for i, x := range s {
		e[i] = termsafe.Field(x)
	}
	return e
}

// writeNetStatus prints a sandbox's policy, counters and recent denials.
func writeNetStatus(w io.Writer, st *sandboxv1.GetNetworkStatusResponse) error {
	var policy strings.Builder
	if err := writePolicy(&policy, st.GetPolicy()); err != nil {
		return err
	}
	fmt.Fprint(w, "POLICY\n"+indent(policy.String()))
	k := st.GetCounters()
	fmt.Fprintln(w, "\nCOUNTERS (since the sandbox's network was last attached)")
	var counters strings.Builder
	tw := tabwriter.NewWriter(&counters, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "bytes:\tout %d, in %d\n", k.GetBytesOut(), k.GetBytesIn())
	fmt.Fprintf(tw, "connections:\tallowed %d, denied %d, open %d, refused at cap %d\n",
		k.GetConnectionsAllowed(), k.GetConnectionsDenied(), k.GetConnectionsOpen(), k.GetConnectionsRefusedAtCap())
	fmt.Fprintf(tw, "dns queries:\tallowed %d, denied %d, rate-limited %d\n", k.GetDnsAllowed(), k.GetDnsDenied(), k.GetDnsRateLimited())
	fmt.Fprintf(tw, "rule requests:\t%d\n", k.GetRuleRequests())
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprint(w, indent(counters.String()))
	d := st.GetDenials()
	if len(d) == 0 {
		_, err := fmt.Fprintln(w, "\nNo denials.")
		return err
	}
	note := ""
	if n := k.GetDenialsDropped(); n > 0 {
		note = fmt.Sprintf("; %d older ones forgotten", n)
	}
	fmt.Fprintf(w, "\nRECENT DENIALS (%d, oldest first%s)\n", len(d), note)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tKIND\tNAME\tADDRESS\tREASON")
	for _, x := range d {
		kind := strings.ToLower(strings.TrimPrefix(x.GetKind().String(), "NETWORK_DENIAL_KIND_"))
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", formatTime(x.GetTime()), kind, orDash(termsafe.Field(x.GetName())), orDash(termsafe.Field(x.GetAddress())), termsafe.Field(x.GetReason()))
	}
	return tw.Flush()
}

// indent indents every line of s by two spaces.
func indent(s string) string {
	var out strings.Builder
	for _, l := range strings.SplitAfter(s, "\n") {
		if l != "" {
			out.WriteString("  " + l)
		}
	}
	return out.String()
}
