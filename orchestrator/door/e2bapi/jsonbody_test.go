package e2bapi

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/sandboxd/sandboxd/orchestrator/door/e2bapi/envdproto/process"
)

func decodeExecute(body string) (executeRequest, error) {
	var req executeRequest
	err := req.decode(httptest.NewRequest("POST", "/execute", strings.NewReader(body)))
	return req, err
}

// Within its bounds, the streaming decoder reads what encoding/json reads.
func TestDecodeLikeEncodingJSON(t *testing.T) {
	for _, body := range []string{
		``,
		`null`,
		`{}`,
		`{"code":"print(1)"}`,
		`{"code":"x","context_id":"c1","language":"js","env_vars":{"A":"1","B":""}}`,
		`{"code":"x","env_vars":null}`,
		`{"code":null,"language":null}`,
		`{"env_vars":{"A":"1"},"env_vars":{"B":"2","A":"3"}}`,
		`{"unknown":{"deep":[1,2,{"x":null}]},"code":"after"}`,
		`{"code":"\u00e9\ud83d\ude00 \"quoted\" \\ \n"}`,
		` { "code" : "spaced" } `,
		`{"code":"a"} trailing is ignored`,
	} {
		got, err := decodeExecute(body)
		if err != nil {
			t.Errorf("%q: %v", body, err)
			continue
		}
		var want struct {
			Code      string            `json:"code"`
			ContextID string            `json:"context_id"`
			Language  string            `json:"language"`
			EnvVars   map[string]string `json:"env_vars"`
		}
		if strings.TrimSpace(body) != "" {
			json.NewDecoder(strings.NewReader(body)).Decode(&want)
		}
		if got.Code != want.Code || got.ContextID != want.ContextID || got.Language != want.Language ||
			(len(got.EnvVars) > 0 || len(want.EnvVars) > 0) && !reflect.DeepEqual(got.EnvVars, want.EnvVars) {
			t.Errorf("%q: got %+v, encoding/json %+v", body, got, want)
		}
	}
}

// A body past a bound, or malformed, is refused with a message saying
// which; an env map at its bounds is accepted.
func TestDecodeBounds(t *testing.T) {
	env := func(n, valueLen int) string {
		var b strings.Builder
		b.WriteString(`{"code":"1","env_vars":{`)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"K%d":"%s"`, i, strings.Repeat("v", valueLen))
		}
		b.WriteString(`}}`)
		return b.String()
	}
	if req, err := decodeExecute(env(256, 0)); err != nil || len(req.EnvVars) != 256 {
		t.Errorf("256 variables: %d, %v", len(req.EnvVars), err)
	}
	for _, c := range []struct{ body, want string }{
		{env(257, 0), "env_vars has more than 256 variables"},
		{env(100, 1400), "env_vars is more than 131072 bytes long"},
		{`{"code":1}`, "code must be a string, not a number"},
		{`{"env_vars":{"A":1}}`, `env_vars["A"] must be a string, not a number`},
		{`{"env_vars":[]}`, "env_vars must be an object, not an array"},
		{`{"language":"` + strings.Repeat("x", 300) + `"}`, "language is longer than 256 bytes"},
		{`[1]`, "not a JSON object"},
		{`{"code":"x"`, "ends too soon"},
		{`{"code":}`, "not valid JSON"},
		{`{"x":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`, "nested deeper than 32"},
		{`{"x":[` + strings.Repeat("1,", 5000) + `1]}`, "more than 4096 values"},
	} {
		_, err := decodeExecute(c.body)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.60q: %v; want an error with %q", c.body, err, c.want)
		}
	}
	var tr timeoutRequest
	if err := tr.decode(httptest.NewRequest("POST", "/", strings.NewReader(`{"timeout":1.5}`))); err == nil || !strings.Contains(err.Error(), "whole number") {
		t.Errorf("a fractional timeout: %v", err)
	}
	var cr createRequest
	if err := cr.decode(httptest.NewRequest("POST", "/", strings.NewReader(`{"templateID":"base","timeout":30,"autoPause":true,"secure":false,"metadata":{"a":"b"},"envVars":{"E":"1"},"mcp":null}`))); err != nil ||
		cr.TemplateID != "base" || *cr.Timeout != 30 || !*cr.AutoPause || *cr.Secure || cr.Metadata["a"] != "b" || cr.EnvVars["E"] != "1" {
		t.Errorf("create: %+v, %v", cr, err)
	}
}

// envd's messages are scanned before they are built: within the bounds
// they decode as connect's own codecs decode them; past them they are
// refused.
func TestRPCCodecBounds(t *testing.T) {
	envs := func(n int) map[string]string {
		m := map[string]string{}
		for i := range n {
			m[fmt.Sprint("K", i)] = ""
		}
		return m
	}
	for _, n := range []int{0, 3, maxRPCElements} {
		msg := &process.StartRequest{Process: &process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", "echo {,}\"[\\\""}, Envs: envs(n)}}
		js, _ := protojson.Marshal(msg)
		var got process.StartRequest
		if err := (boundedJSONCodec{}).Unmarshal(js, &got); err != nil || !proto.Equal(&got, msg) {
			t.Errorf("%d envs, JSON: %v", n, err)
		}
		pb, _ := proto.Marshal(msg)
		got.Reset()
		if err := (boundedProtoCodec{}).Unmarshal(pb, &got); err != nil || !proto.Equal(&got, msg) {
			t.Errorf("%d envs, proto: %v", n, err)
		}
	}
	msg := &process.StartRequest{Process: &process.ProcessConfig{Cmd: "x", Envs: envs(maxRPCElements + 1)}}
	js, _ := protojson.Marshal(msg)
	pb, _ := proto.Marshal(msg)
	if err := (boundedJSONCodec{}).Unmarshal(js, &process.StartRequest{}); err != errRPCElements {
		t.Errorf("JSON past the bound: %v", err)
	}
	if err := (boundedProtoCodec{}).Unmarshal(pb, &process.StartRequest{}); err != errRPCElements {
		t.Errorf("proto past the bound: %v", err)
	}
	deep := `{"process":{"cmd":"x","args":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}}`
	if err := (boundedJSONCodec{}).Unmarshal([]byte(deep), &process.StartRequest{}); err != errRPCDepth {
		t.Errorf("JSON nested 40 deep: %v", err)
	}
}

// A compressed message stops being decompressed soon after it passes
// maxRPCBody, however much more the stream would give.
func TestBoundedGzip(t *testing.T) {
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	zero := make([]byte, 1<<20)
	for range 64 {
		zw.Write(zero)
	}
	zw.Close()
	z := &boundedGzip{}
	if err := z.Reset(bytes.NewReader(zipped.Bytes())); err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, z)
	if err == nil || n > maxRPCBody+64<<10 {
		t.Errorf("decompressed %d bytes of 64 MiB, %v; want an error soon after %d", n, err, maxRPCBody)
	}
}
