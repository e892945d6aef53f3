package e2bapi

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// E2B's network options, mapped to the domain's policy (core.NetworkPolicy,
// whose words and precedence are E2B's):
//
//   - create: `network` (SandboxNetworkConfig) gives the sandbox network
//     under that policy; without it, `allow_internet_access: true` gives it
//     network under the server's default policy; without either the
//     sandbox is sealed, as every sandbox of this door was before (E2B's
//     default is the other way round: sandboxd never opens a network
//     nobody asked for). `allow_internet_access: false` with `network`
//     adds deny_out 0.0.0.0/0, as E2B documents it; alone it is the sealed
//     sandbox it would be anyway.
//   - rules: E2B keys a list of rules by domain, each rule a transform
//     with headers; the domain has one rule per domain. The list's
//     transforms are merged in order, a later header replacing an earlier
//     one of the same name (names compared case-insensitively, as HTTP
//     does): applying the list in order gives the same request.
//   - PUT /sandboxes/{id}/network (SandboxNetworkUpdateConfig) replaces the
//     egress rules whole, as E2B does ("omitting a field clears it"); the
//     update has no allowPublicTraffic, so the sandbox keeps its own.
//   - refused, never ignored: egressProxy (the gateway is the only way
//     out), maskRequestHost and httpsPorts (port URLs are GetHost's, served
//     by sandboxd's own front).
//   - allowPublicTraffic defaults to false here: port URLs are private
//     unless asked for (E2B's default is public).
//   - info returns `network` with the rules' header names and empty values
//     (sandboxd never returns a secret), and `allowInternetAccess`: whether
//     the sandbox has network at all.

// Bounds of E2B's network options as they are read; the domain's own
// (core.MaxEgressEntries, ...) apply after, with its messages.
const (
	maxEgressEntryLen   = 512
	maxRulesPerDomain   = 16
	maxNetworkBodyBytes = core.MaxNetworkPolicySize
)

// e2bNetwork is what a create's `network` or a network update holds.
type e2bNetwork struct {
	AllowOut, DenyOut  []string
	Rules              map[string][]map[string]string // domain → each rule's transform.headers, in order
	AllowPublicTraffic *bool
}

// fields decodes E2B's network fields into n; update is the update's
// subset (no allowPublicTraffic, maskRequestHost, httpsPorts).
func (n *e2bNetwork) fields(update bool) map[string]field {
	f := map[string]field{
		"allowOut":    stringListField(&n.AllowOut, core.MaxEgressEntries, maxEgressEntryLen),
		"denyOut":     stringListField(&n.DenyOut, core.MaxEgressEntries, maxEgressEntryLen),
		"rules":       n.rulesField(),
		"egressProxy": n.refuseUnlessEmpty("sandboxd's egress leaves only through its own gateway, which tunnels through no proxy"),
	}
	if !update {
		f["allowPublicTraffic"] = boolField(&n.AllowPublicTraffic)
		f["maskRequestHost"] = n.refuseUnlessEmpty("port URLs are served by sandboxd's own front (GetHost)")
		f["httpsPorts"] = n.refuseUnlessEmpty("port URLs are served by sandboxd's own front (GetHost), which reaches ports over plain HTTP")
	}
	return f
}

// refuseUnlessEmpty reads an option this door does not offer, refusing it
// unless it is null, an empty string or an empty list.
func (n *e2bNetwork) refuseUnlessEmpty(why string) field {
	return func(b *jsonBody, name string) error {
		tok, err := b.token()
		if err != nil {
			return err
		}
		switch tok {
		case nil, "":
			return nil
		case json.Delim('['):
			if !b.dec.More() {
				_, err = b.token() // the closing bracket
				return err
			}
		}
		return badRequest(fmt.Sprintf("%s is not supported by sandboxd: %s", name, why))
	}
}

// rulesField decodes E2B's rules: an object of domains, each a list of
// rules {transform: {headers: {...}}}.
func (n *e2bNetwork) rulesField() field {
	return func(b *jsonBody, name string) error {
		if open, err := b.openObject(name, "an object of domains"); !open {
			return err // nil for null
		}
		if n.Rules == nil {
			n.Rules = map[string][]map[string]string{}
		}
		total := 0
		for b.dec.More() {
			kt, err := b.token()
			if err != nil {
				return err
			}
			domain, _ := kt.(string)
			if _, dup := n.Rules[domain]; !dup && len(n.Rules) >= core.MaxNetworkRules {
				return badRequest(fmt.Sprintf("%s has more than %d domains; the limit is %d", name, core.MaxNetworkRules, core.MaxNetworkRules))
			}
			list := n.Rules[domain]
			if list == nil {
				list = []map[string]string{}
			}
			err = arrayField(maxRulesPerDomain, func(i int) field {
				var headers map[string]string
				list = append(list, nil)
				at := len(list) - 1
				return func(b *jsonBody, name string) error {
					err := objectField(nil, map[string]field{
						"transform": objectField(nil, map[string]field{
							"headers": mapField(&headers, "headers", core.MaxRuleHeaders, maxNetworkBodyBytes-total),
						}),
					})(b, name)
					for k, v := range headers {
						total += len(k) + len(v) + 1
					}
					list[at] = headers
					return err
				}
			})(b, fmt.Sprintf("%s[%q]", name, core.Truncate(domain, 64)))
			if err != nil {
				return err
			}
			n.Rules[domain] = list
		}
		_, err := b.token() // the closing brace
		return err
	}
}

// policy is n as the domain's policy: allowInternet false adds deny_out
// 0.0.0.0/0 (E2B's meaning of it); a domain's rules are merged in order.
func (n *e2bNetwork) policy(allowInternet *bool) core.NetworkPolicy {
	p := core.NetworkPolicy{AllowOut: slices.Clone(n.AllowOut), DenyOut: slices.Clone(n.DenyOut)}
	if allowInternet != nil && !*allowInternet && !slices.Contains(p.DenyOut, allTraffic) {
		p.DenyOut = append(p.DenyOut, allTraffic)
	}
	if n.AllowPublicTraffic != nil {
		p.AllowPublicTraffic = *n.AllowPublicTraffic
	}
	if n.Rules != nil {
		p.Rules = make(map[string]core.NetworkRule, len(n.Rules))
		for domain, list := range n.Rules {
			p.Rules[domain] = core.NetworkRule{Headers: mergeHeaders(list)}
		}
	}
	return p
}

// allTraffic is E2B's ALL_TRAFFIC, what allow_internet_access false denies.
const allTraffic = "0.0.0.0/0"

// mergeHeaders merges a domain's rules' headers in order: a later header
// replaces an earlier one of the same name, whatever its case. Two names
// of one rule that differ only in case stay, for the domain to refuse.
// nil when no rule sets a header.
func mergeHeaders(list []map[string]string) map[string]string {
	var out map[string]string
	for _, headers := range list {
		if len(headers) == 0 {
			continue
		}
		if out == nil {
			out = make(map[string]string, len(headers))
		}
		for name := range headers {
			for prev := range out {
				if strings.EqualFold(prev, name) {
					delete(out, prev)
				}
			}
		}
		maps.Copy(out, headers)
	}
	return out
}

// e2bNetworkInfo is E2B's SandboxNetworkConfig as info returns it.
type e2bNetworkInfo struct {
	AllowOut           []string                 `json:"allowOut,omitempty"`
	DenyOut            []string                 `json:"denyOut,omitempty"`
	Rules              map[string][]e2bRuleInfo `json:"rules,omitempty"`
	AllowPublicTraffic bool                     `json:"allowPublicTraffic"`
}

type e2bRuleInfo struct {
	Transform e2bTransformInfo `json:"transform"`
}

type e2bTransformInfo struct {
	Headers map[string]string `json:"headers,omitempty"`
}

// networkInfoOf is a sandbox's policy in E2B's shape, one rule per domain
// with its header names and empty values, whatever the domain returned;
// nil without network.
func networkInfoOf(sb core.Sandbox) *e2bNetworkInfo {
	if !sb.Network || sb.NetworkPolicy == nil {
		return nil
	}
	p := sb.NetworkPolicy
	out := &e2bNetworkInfo{AllowOut: p.AllowOut, DenyOut: p.DenyOut, AllowPublicTraffic: p.AllowPublicTraffic}
	if len(p.Rules) > 0 {
		out.Rules = make(map[string][]e2bRuleInfo, len(p.Rules))
		for domain, r := range p.Rules {
			var t e2bTransformInfo
			if len(r.Headers) > 0 {
				t.Headers = make(map[string]string, len(r.Headers))
				for h := range r.Headers {
					t.Headers[h] = ""
				}
			}
			out.Rules[domain] = []e2bRuleInfo{{Transform: t}}
		}
	}
	return out
}

// updateNetwork answers PUT /sandboxes/{id}/network: the sandbox's egress
// rules replaced whole, its allowPublicTraffic kept. 204; 404 for a
// sandbox the caller does not see; 409 for one created without network
// (its network is fixed at creation); 400 for a bad policy.
func (s *Server) updateNetwork(w http.ResponseWriter, r *http.Request) {
	var n e2bNetwork
	var allowInternet *bool
	fields := n.fields(true)
	fields["allow_internet_access"] = boolField(&allowInternet)
	if err := decodeObject(r.Body, fields); err != nil {
		s.writeError(w, r, "network", err)
		return
	}
	sb, err := s.visible(r.Context(), r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, "network", err)
		return
	}
	p := n.policy(allowInternet)
	if sb.NetworkPolicy != nil {
		p.AllowPublicTraffic = sb.NetworkPolicy.AllowPublicTraffic
	}
	if _, err := s.m.UpdateNetworkPolicy(r.Context(), sb.ID, p); err != nil {
		s.writeError(w, r, "network", err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
