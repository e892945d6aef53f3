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
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// TestFloodFairness: sandbox A floods the gateway with connections (some
// dropped at once, some silent, some naming random hosts, some TLS-like
// garbage) and DNS queries for random names, from another process, while
// sandbox B's requests through the gateway are timed. B's median latency
// under the flood must stay within 2× of its median without it, A must
// stay within its caps, and everything A held must be released after.
//
// The flooder runs as a child process at the lowest CPU priority, as a
// sandbox would run under its own CPU limit: what is measured is what
// the flood costs the gateway, not a test process starving itself.
func TestFloodFairness(t *testing.T) {
	if os.Getenv("EGRESS_FLOOD") == "1" {
		flood(t)
		return
	}
	if testing.Short() {
		t.Skip("-short: the flood runs for seconds")
	}
	e := newEnv(t, Config{Bounds: allowLoopback})
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
		slices.Sort(d)
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
		slices.Sort(d)
		return d
	}
	med := func(d []time.Duration) time.Duration { return d[len(d)/2] }
	p90 := func(d []time.Duration) time.Duration { return d[len(d)*9/10] }

	httpB(20) // warm up: connections, the name cache
	goroutines0 := runtime.NumGoroutine()
	var maxOpen, maxGoroutines int
	// Up to 3 attempts, each timing B alone and then under a fresh
	// flood: the test shares 2 cores with whatever else runs, and one
	// noisy attempt is no verdict on the gateway; a gateway that really
	// lets a flood slow B fails all three.
	const n = 100
	var ratio, ratioDNS float64
	for attempt := 1; attempt <= 3; attempt++ {
		base, baseDNS := httpB(n), dnsB(n/2)
		stop := startFlood(t, e)
		waitFor(t, 20*time.Second, "A's flood to reach its caps", func() bool {
			s := e.g.Stats("a")
			return s.ConnsRefusedAtCap > 100 && s.DNSRateLimited > 1000
		})
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
		flooded, floodedDNS := httpB(n), dnsB(n/2)
		close(sampleStop)
		sampling.Wait()
		sa := e.g.Stats("a")
		report := stop()
		ratio = float64(med(flooded)) / float64(med(base))
		ratioDNS = float64(med(floodedDNS)) / float64(med(baseDNS))
		t.Logf("attempt %d: B's HTTP GET through the gateway: median %v (p90 %v) alone, %v (p90 %v) under A's flood: %.2f×",
			attempt, med(base), p90(base), med(flooded), p90(flooded), ratio)
		t.Logf("attempt %d: B's DNS query: median %v alone, %v under the flood: %.2f× (%d retries so far)", attempt, med(baseDNS), med(floodedDNS), ratioDNS, retries)
		t.Logf("attempt %d: A: %+v; flooder: %s", attempt, sa, report)
		if ratio <= 2 && ratioDNS <= 2 {
			break
		}
	}
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

// startFlood starts the flooder (this test binary, as a child process)
// against e as sandbox A; the function returned stops it and returns its
// report.
func startFlood(t *testing.T, e *env) func() string {
	cmd := exec.Command(os.Args[0], "-test.run=^TestFloodFairness$", "-test.count=1")
	cmd.Env = append(os.Environ(), "EGRESS_FLOOD=1",
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
	report := make(chan string, 1)
	go func() { b, _ := io.ReadAll(out); report <- string(b) }()
	var once sync.Once
	stop := func() string {
		once.Do(func() {
			stdin.Close()
			cmd.Wait()
		})
		return <-report
	}
	t.Cleanup(func() { once.Do(func() { stdin.Close(); cmd.Wait() }) })
	return stop
}

// flood is the child: it floods until its stdin closes or 30 s pass,
// then prints what it sent.
func flood(t *testing.T) {
	setLowestPriority()
	tcpAddr, udpAddr := os.Getenv("EGRESS_FLOOD_TCP"), os.Getenv("EGRESS_FLOOD_UDP")
	src := net.ParseIP(os.Getenv("EGRESS_FLOOD_SRC"))
	done := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(done) }()
	deadline := time.After(30 * time.Second)
	stopped := func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
	const maxConns, maxQueries = 300_000, 2_000_000
	var conns, queries, dialErrs atomic.Int64
	var wg sync.WaitGroup
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src}, Timeout: 2 * time.Second}
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 512)
			for !stopped() && conns.Add(1) <= maxConns {
				c, err := d.Dial("tcp", tcpAddr)
				if err != nil {
					dialErrs.Add(1)
					continue
				}
				c.(*net.TCPConn).SetLinger(0)
				c.SetDeadline(time.Now().Add(3 * time.Second))
				switch i % 4 {
				case 0: // connect and drop
				case 1: // a random name to look up
					fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s.flood.egress.test\r\n\r\n", randHex(8))
					c.Read(buf)
				case 2: // TLS-looking garbage
					c.Write(append([]byte{0x16, 3, 1, 0, 200}, []byte(randHex(100))...))
					c.Read(buf)
				case 3: // silent: holds a slot while the gateway waits for a name
					c.Read(buf)
				}
				c.Close()
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
			for !stopped() && queries.Add(1) <= maxQueries {
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
