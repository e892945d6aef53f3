package webhooks

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"slices"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// DefaultMaxQueue is an endpoint's queue bound when its entry sets none.
const DefaultMaxQueue = 10000

// maxFileBytes bounds the --webhooks file.
const maxFileBytes = 1 << 20

// Endpoint is one receiver of events, as the --webhooks file names it.
type Endpoint struct {
	// Name identifies the endpoint in logs, metrics and the queue: 1 to 64
	// of [A-Za-z0-9_.-].
	Name string `json:"name"`
	// URL is where events are POSTed: http or https.
	URL string `json:"url"`
	// Secret signs the requests, in the Standard Webhooks form:
	// "whsec_" and the base64 of at least 24 random bytes.
	Secret string `json:"secret"`
	// Tenants limits the endpoint to these tenants' sandboxes; empty:
	// every tenant's.
	Tenants []string `json:"tenants,omitempty"`
	// Events limits the endpoint to these kinds; empty: every kind but
	// command.finished, which is sent only to endpoints that name it.
	Events []core.LifecycleKind `json:"events,omitempty"`
	// MaxQueue bounds the events waiting for this endpoint; past it the
	// oldest is dropped. 0: DefaultMaxQueue.
	MaxQueue int `json:"max_queue,omitempty"`
}

// fileFormat is the --webhooks file.
type fileFormat struct {
	Endpoints []Endpoint `json:"endpoints"`
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// LoadFile reads and checks the --webhooks file (JSON: {"endpoints":
// [...]}, unknown fields refused, so that a misspelt "tenants" never
// widens an endpoint to every tenant).
func LoadFile(path string) ([]Endpoint, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(f, maxFileBytes+1)); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if buf.Len() > maxFileBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxFileBytes)
	}
	dec := json.NewDecoder(&buf)
	dec.DisallowUnknownFields()
	var ff fileFormat
	if err := dec.Decode(&ff); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%s: more than one JSON value", path)
	}
	if err := Check(ff.Endpoints); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ff.Endpoints, nil
}

// Check checks endpoints and fills their defaults.
func Check(eps []Endpoint) error {
	seen := map[string]bool{}
	for i := range eps {
		e := &eps[i]
		if !nameRE.MatchString(e.Name) {
			return fmt.Errorf("endpoint %d: name %q: want 1 to 64 of A-Z a-z 0-9 _ . -", i, e.Name)
		}
		if seen[e.Name] {
			return fmt.Errorf("endpoint %q is listed twice", e.Name)
		}
		seen[e.Name] = true
		u, err := url.Parse(e.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("endpoint %q: url %q: want an absolute http or https URL", e.Name, e.URL)
		}
		if u.User != nil {
			return fmt.Errorf("endpoint %q: url: credentials in the URL are not allowed (the signature authenticates sandboxd)", e.Name)
		}
		if err := checkSecret(e.Secret); err != nil {
			return fmt.Errorf("endpoint %q: secret: %w", e.Name, err)
		}
		for _, t := range e.Tenants {
			if err := core.ValidateTenant(t); err != nil {
				return fmt.Errorf("endpoint %q: tenants: %w", e.Name, err)
			}
		}
		for _, k := range e.Events {
			if !slices.Contains(core.LifecycleKinds, k) {
				return fmt.Errorf("endpoint %q: events: unknown event %q (known: %v)", e.Name, k, core.LifecycleKinds)
			}
		}
		switch {
		case e.MaxQueue < 0:
			return fmt.Errorf("endpoint %q: max_queue must not be negative", e.Name)
		case e.MaxQueue == 0:
			e.MaxQueue = DefaultMaxQueue
		}
	}
	return nil
}

// checkSecret checks a secret's form: "whsec_" and base64 of at least 24
// bytes (Standard Webhooks asks for 24 to 64).
func checkSecret(s string) error {
	const prefix = "whsec_"
	if len(s) <= len(prefix) || s[:len(prefix)] != prefix {
		return fmt.Errorf(`want "whsec_" followed by the base64 of 24 to 64 random bytes`)
	}
	key, err := base64Std.DecodeString(s[len(prefix):])
	if err != nil {
		return fmt.Errorf("not base64 after whsec_: %v", err)
	}
	if len(key) < 24 || len(key) > 64 {
		return fmt.Errorf("%d bytes after decoding; want 24 to 64", len(key))
	}
	if _, err := standardwebhooks.NewWebhook(s); err != nil {
		return err
	}
	return nil
}

// wants reports whether e receives an event of kind for tenant.
func (e *Endpoint) wants(kind core.LifecycleKind, tenant string) bool {
	if len(e.Tenants) > 0 && !slices.Contains(e.Tenants, tenant) {
		return false
	}
	if len(e.Events) == 0 {
		return kind != core.LifecycleCommandFinished
	}
	return slices.Contains(e.Events, kind)
}
