package egress

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// TestFloodFairness: sandbox A floods the gateway with connections (some
// dropped at once, some silent, some naming random hosts, some TLS-like
// garbage) and DNS queries for random names, while sandbox B's requests
// through the gateway are timed. B's median latency under the flood must
// stay within 2× of its median without it, A must stay within its caps,
// and everything A held must be released after.
//
// The flooder is another process limited to one CPU (GOMAXPROCS=1), as a
// sandbox runs under its own CPU limit. It is paused and resumed
// (SIGSTOP, SIGCONT) so that B's samples alternate between windows with
// and without the flood: whatever else loads the machine weighs on both
// alike. A window counts as flooded only if A's refusals rose during it.
func TestFloodFairness(t *testing.T) {
	if os.Getenv("EGRESS_FLOOD") == "1" {
		flood(t)
		return
	}
	if testing.Short() {
		t.Skip("-short: the flood runs for seconds")
	}
	// B's own queries (20 a round, up to 30 rounds in a few seconds) must
	// stay under its rate, so that a refusal of B can only be A's doing:
	// the rate is raised from the default 100/s, which A's flood passes
	// a thousandfold anyway.
	e := newEnv(t, Config{Bounds: allowLoopback, DNSPerSecond: 1000, DNSBurst: 1000})
	e.attach("a", srcA, core.NetworkPolicy{}) // every name is looked up: the costliest policy
	e.attach("b", srcB, core.NetworkPolicy{})
	e.orig.setSource(srcA, ap("127.0.0.1:1")) // nothing listens: no upstream shared with B

	client := e.client(srcB, e.httpDst(), nil)
	url := fmt.Sprintf("http://www.egress.test:%d/", e.httpPort)
	httpB := func(n int) []time.Duration {
		d := make([]time.Duration, 0, n)
		for range n {
			start := time.Now()
			if code, _, err := e.get(client, url); err != nil || code != 200 {
				t.Fatalf("B's GET = %d, %v", code, err)
			}
			d = append(d, time.Since(start))
		}
		return d
	}
	// B's DNS is timed as a stub resolver sees it, retrying after 250 ms:
	// the socket is shared, and the kernel may drop a packet of B's when
	// the flood overflows it (the plumbing's per-sandbox limit in
	// nftables keeps such floods off the socket in production).
	retries := 0
	dnsB := func(n int) []time.Duration {
		d := make([]time.Duration, 0, n)
		c := &dns.Client{Timeout: 250 * time.Millisecond, Dialer: &net.Dialer{LocalAddr: &net.UDPAddr{IP: net.ParseIP(srcB)}}}
		m := new(dns.Msg)
		m.SetQuestion("www.egress.test.", dns.TypeA)
		for range n {
			start := time.Now()
			for try := 0; ; try++ {
				r, _, err := c.Exchange(m, e.udp.LocalAddr().String())
				if err == nil && len(r.Answer) == 1 {
					break
				}
				if try == 3 {
					t.Fatalf("B's query = %v, %v (4 tries)", r, err)
				}
				retries++
			}
			d = append(d, time.Since(start))
		}
		return d
	}
	med := func(d []time.Duration) time.Duration { d = slices.Clone(d); slices.Sort(d); return d[len(d)/2] }
	p90 := func(d []time.Duration) time.Duration { d = slices.Clone(d); slices.Sort(d); return d[len(d)*9/10] }

	httpB(20) // warm up: connections, the name cache
	goroutines0 := runtime.NumGoroutine()
	fl := startFlood(t, e)
	waitFor(t, 20*time.Second, "A's flood to reach its caps", func() bool {
		s := e.g.Stats("a")
		return s.ConnsRefusedAtCap > 100 && s.DNSRateLimited > 1000
	})

	var maxOpen, maxGoroutines int
	sampleStop := make(chan struct{})
	var sampling sync.WaitGroup
	sampling.Add(1)
	go func() {
		defer sampling.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-sampleStop:
				return
			case <-tick.C:
				maxOpen = max(maxOpen, e.g.Stats("a").ConnsOpen)
				maxGoroutines = max(maxGoroutines, runtime.NumGoroutine())
			}
		}
	}()

	// One pass: rounds of a quiet window and a flooded one, until rounds
	// flooded windows are counted. On a loaded machine (CI runs packages
	// side by side) the one-CPU flooder is sometimes starved through a
	// window; such windows prove nothing and are not counted, so a pass
	// tries up to maxTries rounds before it gives up.
	const rounds, maxTries, perWindow = 10, 30, 20
	pass := func() (ratio, ratioDNS float64, counted int) {
		var base, flooded, baseDNS, floodedDNS []time.Duration
		tries := 0
		for ; tries < maxTries && counted < rounds; tries++ {
			fl.pause()
			// What A sent before the pause is still being dropped for a
			// moment: the first samples of the quiet window are not kept.
			httpB(3)
			base = append(base, httpB(perWindow)...)
			baseDNS = append(baseDNS, dnsB(perWindow/2)...)
			before := e.g.Stats("a")
			fl.resume()
			waitFor(t, 10*time.Second, "A's flood to resume", func() bool {
				s := e.g.Stats("a")
				return s.ConnsRefusedAtCap-before.ConnsRefusedAtCap > 20 && s.DNSRateLimited-before.DNSRateLimited > 200
			})
			during := e.g.Stats("a")
			h, d := httpB(perWindow), dnsB(perWindow/2)
			if s := e.g.Stats("a"); s.ConnsRefusedAtCap-during.ConnsRefusedAtCap < 5 || s.DNSRateLimited-during.DNSRateLimited < 100 {
				continue // the flooder was starved: this window proves nothing
			}
			counted++
			flooded, floodedDNS = append(flooded, h...), append(floodedDNS, d...)
		}
		if counted < rounds/2 {
			t.Fatalf("only %d of %d windows had a sustained flood (the flooder was starved: is the machine overloaded?)", counted, tries)
		}
		ratio = float64(med(flooded)) / float64(med(base))
		ratioDNS = float64(med(floodedDNS)) / float64(med(baseDNS))
		t.Logf("B's HTTP GET through the gateway: median %v (p90 %v) without A's flood, %v (p90 %v) under it: %.2f× (%d of %d flooded windows counted)",
			med(base), p90(base), med(flooded), p90(flooded), ratio, counted, tries)
		t.Logf("B's DNS query: median %v without, %v under the flood: %.2f× (%d retries)", med(baseDNS), med(floodedDNS), ratioDNS, retries)
		return ratio, ratioDNS, counted
	}
	// A second pass only if the first failed: a burst of load from
	// elsewhere on the machine during one pass is no verdict on the
	// gateway; a gateway that lets a flood slow B fails both.
	ratio, ratioDNS, _ := pass()
	if ratio > 2 || ratioDNS > 2 {
		t.Logf("over 2×; measuring once more")
		ratio, ratioDNS, _ = pass()
	}
	close(sampleStop)
	sampling.Wait()
	t.Logf("A: %+v; flooder: %s", e.g.Stats("a"), fl.stop())
	t.Logf("at most %d of A's connections open, %d goroutines in the process (%d before)", maxOpen, maxGoroutines, goroutines0)
	if ratio > 2 {
		t.Errorf("A's flood slowed B's egress %.2f× (more than 2×)", ratio)
	}
	if ratioDNS > 2 {
		t.Errorf("A's flood slowed B's DNS %.2f× (more than 2×)", ratioDNS)
	}
	if maxOpen > defaultMaxConnsPerSandbox {
		t.Errorf("A had %d connections open (cap %d)", maxOpen, defaultMaxConnsPerSandbox)
	}
	// Per A connection: its own goroutine, the dial watcher, the other
	// copy direction; plus DNS queries in flight and the readers.
	if limit := goroutines0 + 3*defaultMaxConnsPerSandbox + dnsInFlightPerSandbox + 50; maxGoroutines > limit {
		t.Errorf("%d goroutines under the flood (bound %d)", maxGoroutines, limit)
	}
	if sb := e.g.Stats("b"); sb.ConnsRefusedAtCap != 0 || sb.DNSRateLimited != 0 {
		t.Errorf("B was refused: %+v", sb)
	}
	// Everything A held is released.
	waitFor(t, 15*time.Second, "A's connections to close", func() bool { return e.g.Stats("a").ConnsOpen == 0 })
	waitFor(t, 15*time.Second, "goroutines to return", func() bool { return runtime.NumGoroutine() <= goroutines0+10 })
}

// flooder is the flooding child process: this test binary again, with
// EGRESS_FLOOD=1, on one CPU.
type flooder struct {
	cmd    *exec.Cmd
	report chan string
	once   sync.Once
	stdin  io.Closer
}

// startFlood starts the flooder against e as sandbox A.
func startFlood(t *testing.T, e *env) *flooder {
	cmd := exec.Command(os.Args[0], "-test.run=^TestFloodFairness$", "-test.count=1")
	cmd.Env = append(os.Environ(), "EGRESS_FLOOD=1", "GOMAXPROCS=1",
		"EGRESS_FLOOD_TCP="+e.tcp.Addr().String(), "EGRESS_FLOOD_UDP="+e.udp.LocalAddr().String(), "EGRESS_FLOOD_SRC="+srcA)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f := &flooder{cmd: cmd, report: make(chan string, 1), stdin: stdin}
	go func() { b, _ := io.ReadAll(out); f.report <- string(b) }()
	t.Cleanup(func() { f.stop() })
	return f
}

func (f *flooder) pause()  { f.cmd.Process.Signal(syscall.SIGSTOP) }
func (f *flooder) resume() { f.cmd.Process.Signal(syscall.SIGCONT) }

// stop ends the flooder (it stops when its stdin closes) and returns its
// report.
func (f *flooder) stop() string {
	f.once.Do(func() {
		f.resume()
		f.stdin.Close()
		f.cmd.Wait()
	})
	select {
	case r := <-f.report:
		return r
	default:
		return ""
	}
}

// flood is the child: it floods until its stdin closes or 2 minutes
// pass, then prints what it sent. Connections it opens are held for 2 s
// (at most 4000 at a time) while it goes on opening more.
func flood(t *testing.T) {
	tcpAddr, udpAddr := os.Getenv("EGRESS_FLOOD_TCP"), os.Getenv("EGRESS_FLOOD_UDP")
	src := net.ParseIP(os.Getenv("EGRESS_FLOOD_SRC"))
	done := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(done) }()
	deadline := time.After(2 * time.Minute)
	stopped := func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
	const maxConns, maxQueries = 1_000_000, 20_000_000
	var conns, queries, dialErrs atomic.Int64
	var wg sync.WaitGroup
	held := make(chan struct{}, 4000)
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src}, Timeout: 2 * time.Second}
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stopped() && conns.Add(1) <= maxConns {
				select {
				case held <- struct{}{}:
				case <-done:
					return
				}
				c, err := d.Dial("tcp", tcpAddr)
				if err != nil {
					dialErrs.Add(1)
					<-held
					continue
				}
				c.(*net.TCPConn).SetLinger(0)
				switch i % 4 {
				case 0: // connect and drop
				case 1: // a random name to look up
					fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s.flood.egress.test\r\n\r\n", randHex(8))
				case 2: // TLS-looking garbage
					c.Write(append([]byte{0x16, 3, 1, 0, 200}, []byte(randHex(100))...))
				case 3: // silent: holds a slot while the gateway waits for a name
				}
				if i%4 == 0 {
					c.Close()
					<-held
					continue
				}
				time.AfterFunc(2*time.Second, func() { c.Close(); <-held })
			}
		}()
	}
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ua, _ := net.ResolveUDPAddr("udp", udpAddr)
			c, err := net.DialUDP("udp", &net.UDPAddr{IP: src}, ua)
			if err != nil {
				return
			}
			defer c.Close()
			go io.Copy(io.Discard, c)
			m := new(dns.Msg)
			for n := 0; !stopped() && queries.Add(1) <= maxQueries; n++ {
				if n%64 == 0 {
					runtime.Gosched() // let the connection flood run too (one CPU)
				}
				m.SetQuestion(randHex(10)+".flood.egress.test.", dns.TypeA)
				raw, _ := m.Pack()
				c.Write(raw)
			}
		}()
	}
	select {
	case <-done:
	case <-deadline:
	}
	wg.Wait()
	w := bufio.NewWriter(os.Stdout)
	fmt.Fprintf(w, "%d connections (%d dials failed), %d DNS queries", min(conns.Load(), maxConns), dialErrs.Load(), min(queries.Load(), maxQueries))
	w.Flush()
}

func randHex(n int) string {
	b := make([]byte, n/2)
	rand.Read(b)
	return hex.EncodeToString(b)
}
