package grpcapi

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/metrics"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// observedFake acquires and runs one python command whose events carry
// known payloads: 5 stdout bytes, a 2-byte result, done ok after 1.5s.
func observedFake() *fakeManager {
	return &fakeManager{
		AcquireFunc: func(context.Context, string, core.Options) (core.AcquireResult, error) {
			return core.AcquireResult{Sandbox: core.Sandbox{ID: sb1, UserID: "alice", State: core.StateRunning}, Created: true}, nil
		},
		SubmitFunc: func(context.Context, core.ExecRequest) (string, error) { return "c1", nil },
		FollowFunc: func(_ context.Context, _, _ string, _ int64, fn func(core.Event) error) error {
			for _, e := range []core.Event{
				{Seq: 1, Type: ioproto.EventStarted, Language: ioproto.LanguagePython},
				{Seq: 2, Type: ioproto.EventStdout, Text: "hello"},
				{Seq: 3, Type: ioproto.EventResult, Data: map[string]string{"text/plain": "42"}},
				{Seq: 4, Type: ioproto.EventDone, Status: ioproto.StatusOK, DurationMS: 1500},
			} {
				if err := fn(e); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

func runObservedTraffic(t *testing.T, ctx context.Context, env *testEnv) {
	t.Helper()
	if _, err := env.client.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: "alice"}); err != nil {
		t.Fatalf("AcquireSandbox: %v", err)
	}
	s, err := env.client.Execute(ctx, &sandboxv1.ExecuteRequest{SandboxId: sb1, Code: "print('hello'); 42"})
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	for {
		if _, err := s.Recv(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("Execute stream: %v", err)
		}
	}
}

func TestMetricsCountCallsCommandsAndBytes(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	env := newTestEnv(t, observedFake(), WithMetrics(metrics.New(reg)))
	ctx := testCtx(t)
	runObservedTraffic(t, ctx, env)
	// StreamCommand's bytes count, its done event does not (no double count
	// of a resumed command).
	s, err := env.client.StreamCommand(ctx, &sandboxv1.StreamCommandRequest{SandboxId: sb1, CommandId: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := s.Recv(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("StreamCommand: %v", err)
		}
	}

	want := `# HELP sandboxd_commands_total Commands whose done event an Execute stream delivered, by language and final status (ok, error, timeout, interrupted, killed).
# TYPE sandboxd_commands_total counter
sandboxd_commands_total{language="python",status="ok"} 1
# HELP sandboxd_streamed_bytes_total Payload bytes of command events sent to clients (Execute and StreamCommand), by kind: stdout and stderr text, display and result MIME-bundle values.
# TYPE sandboxd_streamed_bytes_total counter
sandboxd_streamed_bytes_total{kind="display"} 0
sandboxd_streamed_bytes_total{kind="result"} 4
sandboxd_streamed_bytes_total{kind="stderr"} 0
sandboxd_streamed_bytes_total{kind="stdout"} 10
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sandboxd_commands_total", "sandboxd_streamed_bytes_total"); err != nil {
		t.Error(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	handled := map[string]float64{}
	var durationCount uint64
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			switch f.GetName() {
			case "grpc_server_handled_total":
				handled[l["grpc_method"]+" "+l["grpc_code"]] = m.GetCounter().GetValue()
			case "sandboxd_command_duration_seconds":
				durationCount += m.GetHistogram().GetSampleCount()
			}
		}
	}
	for _, k := range []string{"AcquireSandbox OK", "Execute OK", "StreamCommand OK"} {
		if handled[k] != 1 {
			t.Errorf("grpc_server_handled_total{%s} = %v, want 1 (all: %v)", k, handled[k], handled)
		}
	}
	if handled["DeleteSandbox OK"] != 0 {
		t.Errorf("DeleteSandbox handled %v times, want 0", handled["DeleteSandbox OK"])
	}
	if durationCount != 1 {
		t.Errorf("command duration observations = %d, want 1", durationCount)
	}
	if got := testutil.CollectAndCount(reg, "grpc_server_handling_seconds"); got == 0 {
		t.Error("no grpc_server_handling_seconds histogram")
	}
}

func TestTracesAreChildrenOfTheCallersSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	env := newTestEnv(t, observedFake(), WithTracerProvider(tp))

	const (
		traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		spanID  = "00f067aa0ba902b7"
	)
	ctx := metadata.AppendToOutgoingContext(testCtx(t), "traceparent", "00-"+traceID+"-"+spanID+"-01")
	if _, err := healthpb.NewHealthClient(env.conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health: %v", err)
	}
	runObservedTraffic(t, ctx, env)

	// The server ends its span once the handler returned, which may be
	// just after the client saw the end of the call.
	want := []string{"sandbox.v1.SandboxService/AcquireSandbox", "sandbox.v1.SandboxService/Execute"}
	var spans []sdktrace.ReadOnlySpan
	deadline := time.Now().Add(10 * time.Second)
	for {
		spans = rec.Ended()
		if len(spans) >= len(want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	got := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		got[s.Name()] = s
	}
	if len(spans) != len(want) {
		names := make([]string, 0, len(spans))
		for _, s := range spans {
			names = append(names, s.Name())
		}
		t.Fatalf("ended spans %q within 10s, want %q (health checks untraced)", names, want)
	}
	for _, name := range want {
		s, ok := got[name]
		if !ok {
			t.Errorf("no span %q", name)
			continue
		}
		if s.SpanKind() != trace.SpanKindServer {
			t.Errorf("%s: kind %v, want server", name, s.SpanKind())
		}
		if id := s.SpanContext().TraceID().String(); id != traceID {
			t.Errorf("%s: trace ID %s, want the caller's %s", name, id, traceID)
		}
		if p := s.Parent(); !p.IsRemote() || p.SpanID().String() != spanID {
			t.Errorf("%s: parent %v (remote %v), want the caller's span %s", name, p.SpanID(), p.IsRemote(), spanID)
		}
	}
}
