package ioproto

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestParseRecord(t *testing.T) {
	tests := []struct {
		name    string
		line    string
		want    Record
		wantID  string
		wantErr string
	}{
		{name: "exec", line: `{"type":"exec","command_id":"c1","language":"bash","code":"ls","timeout_ms":5}`,
			want: Record{Type: KindExec, CommandID: "c1", Language: LanguageBash, Code: "ls", TimeoutMS: 5}, wantID: "c1"},
		{name: "default language", line: `{"type":"exec","command_id":"c2","code":"1"}`,
			want: Record{Type: KindExec, CommandID: "c2", Language: LanguagePython, Code: "1"}, wantID: "c2"},
		{name: "unknown fields ignored", line: `{"type":"interrupt","command_id":"c3","future":true}`,
			want: Record{Type: KindInterrupt, CommandID: "c3"}, wantID: "c3"},
		{name: "bad json keeps id", line: `{"type":"exec","command_id":"c4","code":"x`, wantID: "c4", wantErr: "malformed"},
		{name: "wrong field type keeps id", line: `{"type":"exec","command_id":"c5","timeout_ms":"soon"}`, wantID: "c5", wantErr: "malformed"},
		{name: "unknown type", line: `{"type":"launch","command_id":"c6"}`, wantID: "c6", wantErr: `unknown type "launch"`},
		{name: "unknown language", line: `{"type":"exec","command_id":"c7","language":"cobol"}`, wantID: "c7", wantErr: `unknown language "cobol"`},
		{name: "negative timeout", line: `{"type":"exec","command_id":"c8","timeout_ms":-1}`, wantID: "c8", wantErr: "negative"},
		{name: "missing type", line: `{"command_id":"c9"}`, wantID: "c9", wantErr: "type is missing"},
		{name: "path in id", line: `{"type":"exec","command_id":"../etc"}`, wantErr: "command_id"},
		{name: "empty id", line: `{"type":"exec"}`, wantErr: "command_id is empty"},
		{name: "not json", line: `hello`, wantErr: "malformed"},
		{name: "exec with stdin and pty", line: `{"type":"exec","command_id":"s1","language":"bash","code":"cat","stdin":true,"pty":{"rows":24,"cols":80}}`,
			want: Record{Type: KindExec, CommandID: "s1", Language: LanguageBash, Code: "cat", Stdin: true, Pty: PtySize{Rows: 24, Cols: 80}}, wantID: "s1"},
		{name: "stdin for python", line: `{"type":"exec","command_id":"s2","code":"input()","stdin":true}`, wantID: "s2", wantErr: "bash commands only"},
		{name: "pty too large", line: `{"type":"exec","command_id":"s3","language":"bash","pty":{"rows":24,"cols":70000}}`, wantID: "s3", wantErr: "terminal size"},
		{name: "stdin data", line: `{"type":"stdin","command_id":"s4","data":"aGkK"}`,
			want: Record{Type: KindStdin, CommandID: "s4", Data: "aGkK"}, wantID: "s4"},
		{name: "stdin close", line: `{"type":"stdin_close","command_id":"s5"}`, want: Record{Type: KindStdinClose, CommandID: "s5"}, wantID: "s5"},
		{name: "resize", line: `{"type":"resize","command_id":"s6","pty":{"rows":50,"cols":200}}`,
			want: Record{Type: KindResize, CommandID: "s6", Pty: PtySize{Rows: 50, Cols: 200}}, wantID: "s6"},
		{name: "resize without size", line: `{"type":"resize","command_id":"s7"}`, wantID: "s7", wantErr: "without pty size"},
		{name: "stdin data not base64", line: `{"type":"stdin","command_id":"s8","data":"!!"}`, wantID: "s8", wantErr: "not base64"},
		{name: "env", line: `{"type":"env","command_id":"sbx-env-1","env":{"A":"1","B":"two"}}`,
			want: Record{Type: KindEnv, CommandID: "sbx-env-1", Env: map[string]string{"A": "1", "B": "two"}}, wantID: "sbx-env-1"},
		{name: "env bad name", line: `{"type":"env","command_id":"e2","env":{"A=B":"1"}}`, wantID: "e2", wantErr: "contains '='"},
		{name: "env driver variable", line: `{"type":"env","command_id":"e3","env":{"SANDBOX_POOL_DRIVER":"1"}}`, wantID: "e3", wantErr: "driver reads for its own control"},
		{name: "env nul value", line: `{"type":"env","command_id":"e4","env":{"A":"x\u0000y"}}`, wantID: "e4", wantErr: "NUL"},
		{name: "mounts", line: `{"type":"mounts","command_id":"sbx-mounts-1","mounts":["/data","/mnt/ro"]}`,
			want: Record{Type: KindMounts, CommandID: "sbx-mounts-1", Mounts: []string{"/data", "/mnt/ro"}}, wantID: "sbx-mounts-1"},
		{name: "mounts none", line: `{"type":"mounts","command_id":"m2"}`, want: Record{Type: KindMounts, CommandID: "m2"}, wantID: "m2"},
		{name: "mounts relative", line: `{"type":"mounts","command_id":"m3","mounts":["data"]}`, wantID: "m3", wantErr: "absolute, clean path"},
		{name: "mounts unclean", line: `{"type":"mounts","command_id":"m4","mounts":["/data/../etc"]}`, wantID: "m4", wantErr: "absolute, clean path"},
		{name: "mounts root", line: `{"type":"mounts","command_id":"m5","mounts":["/"]}`, wantID: "m5", wantErr: "absolute, clean path"},
		{name: "two ids is ambiguous", line: `{"command_id":"a","command_id":"b",`, wantErr: "malformed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, id, err := ParseRecord([]byte(tt.line))
			if id != tt.wantID {
				t.Errorf("id = %q, want %q", id, tt.wantID)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				if !errors.Is(err, ErrMalformed) {
					t.Errorf("err = %v does not wrap ErrMalformed", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestStdinChunkBound(t *testing.T) {
	big := StdinRecord("c", make([]byte, MaxStdinChunk+1))
	if _, err := EncodeRecord(big); err == nil || !errors.Is(err, ErrMalformed) {
		t.Fatalf("EncodeRecord of %d bytes of stdin = %v, want ErrMalformed", MaxStdinChunk+1, err)
	}
	ok := StdinRecord("c", make([]byte, MaxStdinChunk))
	line, err := EncodeRecord(ok)
	if err != nil {
		t.Fatalf("EncodeRecord of %d bytes of stdin: %v", MaxStdinChunk, err)
	}
	got, _, err := ParseRecord(line[:len(line)-1])
	if b, derr := got.StdinData(); err != nil || derr != nil || len(b) != MaxStdinChunk {
		t.Fatalf("round trip: %v, %v, %d bytes", err, derr, len(b))
	}
}

func TestNamesCommand(t *testing.T) {
	for kind, want := range map[string]bool{KindExec: true, KindInterrupt: false, KindStdin: false, KindStdinClose: false, KindResize: false, KindAdopt: false, KindEnv: false, KindMounts: false} {
		if NamesCommand(kind) != want {
			t.Errorf("NamesCommand(%q) = %v, want %v", kind, !want, want)
		}
	}
}

func TestParseRecordTooLong(t *testing.T) {
	line := `{"type":"exec","command_id":"big","code":"` + strings.Repeat("x", MaxRecordLen) + `"}`
	if _, _, err := ParseRecord([]byte(line)); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("err = %v, want a length error", err)
	}
}

func TestValidateCommandID(t *testing.T) {
	for _, ok := range []string{"a", "A.b-c_d", "0123", strings.Repeat("x", MaxCommandIDLen)} {
		if err := ValidateCommandID(ok); err != nil {
			t.Errorf("ValidateCommandID(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", ".hidden", "-x", "a/b", "a b", "é", strings.Repeat("x", MaxCommandIDLen+1), "a\n"} {
		if err := ValidateCommandID(bad); err == nil {
			t.Errorf("ValidateCommandID(%q) = nil, want an error", bad)
		}
	}
}

func TestEncodeRecordRoundTrip(t *testing.T) {
	in := Record{Type: KindExec, CommandID: "c1", Language: LanguagePython, Code: "print('a\\nb')\n", TimeoutMS: 1000}
	line, err := EncodeRecord(in)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(line), "\n") != 1 || line[len(line)-1] != '\n' {
		t.Fatalf("encoded record is not exactly one line: %q", line)
	}
	out, _, err := ParseRecord(line[:len(line)-1])
	if err != nil || !reflect.DeepEqual(out, in) {
		t.Fatalf("round trip: got %+v, %v; want %+v", out, err, in)
	}
	if _, err := EncodeRecord(Record{Type: KindExec, CommandID: "bad id"}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("EncodeRecord accepted an invalid record: %v", err)
	}
}

// FuzzParseRecord checks that no line can crash the parser, that a reported
// command ID is always a valid one, and that accepted records survive a
// round trip through EncodeRecord unchanged.
func FuzzParseRecord(f *testing.F) {
	f.Add([]byte(`{"type":"exec","command_id":"c1","language":"python","code":"x = 1","timeout_ms":100}`))
	f.Add([]byte(`{"type":"interrupt","command_id":"c1"}`))
	f.Add([]byte(`{"type":"env","command_id":"sbx-env-1","env":{"A":"1"}}`))
	f.Add([]byte(`{"type":"exec","command_id":"c1","code":"x`))
	f.Add([]byte(`{"type":"exec","command_id":"../../etc/passwd"}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"type":"exec","command_id":"\u0000"}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		rec, id, err := ParseRecord(line)
		if id != "" && ValidateCommandID(id) != nil {
			t.Fatalf("ParseRecord returned invalid id %q", id)
		}
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error does not wrap ErrMalformed: %v", err)
			}
			return
		}
		enc, err := EncodeRecord(rec)
		if err != nil {
			t.Fatalf("accepted record does not encode: %+v: %v", rec, err)
		}
		again, _, err := ParseRecord(enc[:len(enc)-1])
		if err != nil || !reflect.DeepEqual(again, rec) {
			t.Fatalf("round trip changed the record: %+v -> %+v (%v)", rec, again, err)
		}
	})
}

func TestEnvRecord(t *testing.T) {
	line, err := EncodeRecord(EnvRecord("sbx-env-3f9a", map[string]string{"B": "two", "A": "1"}))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"type":"env","command_id":"sbx-env-3f9a","env":{"A":"1","B":"two"}}` + "\n"; string(line) != want {
		t.Fatalf("EncodeRecord = %q, want %q", line, want)
	}
	for _, name := range DriverEnv {
		if _, err := EncodeRecord(EnvRecord("e", map[string]string{name: "1"})); !errors.Is(err, ErrMalformed) {
			t.Errorf("an env record setting %s encoded: %v", name, err)
		}
		// A command may still set one for itself: it configures nothing.
		if _, err := EncodeRecord(Record{Type: KindExec, CommandID: "c", Env: map[string]string{name: "1"}}); err != nil {
			t.Errorf("an exec's own env with %s: %v", name, err)
		}
	}
}

func TestMergeEnv(t *testing.T) {
	cur := map[string]string{"A": "1", "B": "2"}
	got, err := MergeEnv(cur, map[string]string{"B": "two", "C": "3"})
	if err != nil || !reflect.DeepEqual(got, map[string]string{"A": "1", "B": "two", "C": "3"}) {
		t.Fatalf("MergeEnv = %v, %v", got, err)
	}
	if cur["B"] != "2" || len(cur) != 2 {
		t.Fatalf("MergeEnv changed its input: %v", cur)
	}
	big := map[string]string{}
	for i := range MaxEnvVars {
		big[fmt.Sprint("V", i)] = "x"
	}
	if _, err := MergeEnv(big, map[string]string{"ONE_MORE": "x"}); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("MergeEnv past %d variables: %v", MaxEnvVars, err)
	}
}
