package e2e

// The escape suite: code inside a real sandbox tries to get out, under every
// runtime CI has (runc and gVisor's runsc), through the real sandboxd binary
// and its gRPC API. Each attempt is a small program that prints a verdict,
// SUCCEEDED or BLOCKED, with what it saw; a few attempts are judged on the
// host instead (what the file API returned, whether a host listener was
// reached, whether a host file changed). The suite fails if any attempt
// succeeds or gives no verdict, and if the sandbox cannot run code
// afterwards. It reports one line per runtime, e.g.
//
//	escape suite (runc): 38 attempts, 0 succeeded, sandbox usable afterwards: yes
//
// "Escape" means gaining something the sandbox must not have: root or
// capabilities, the host's processes, files, network or container engine,
// another sandbox's data, or more processes, memory or disk than its limits.
// What sandboxed code may do to its own sandbox (kill or ptrace its own
// driver, which runs as the same unprivileged user) is not an escape; the
// attempts report what is possible there too, and SECURITY.md says why it
// is acceptable.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sandboxd/sandboxd/internal/testenv"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

func TestEscapeSuite(t *testing.T) {
	env := needE2E(t)
	for _, rt := range suiteRuntimes(t) {
		t.Run(rt, func(t *testing.T) {
			runEscapeSuite(t, env.withRuntime(t, rt), rt)
		})
	}
}

// escapeSandboxDisk is the /workspace size the attacker asks for, when the
// server bounds disk use: small, so filling it is quick.
const escapeSandboxDisk = 64 << 20

// escapeRun is one runtime's run of the suite.
type escapeRun struct {
	t       *testing.T
	ctx     context.Context
	env     *e2eEnv
	d       *daemon
	c       sandboxv1.SandboxServiceClient
	runtime string

	attacker, victim *sandboxv1.Sandbox
	victimSecret     string
	// vars fills the @NAME@ placeholders of attempt programs.
	vars *strings.Replacer

	results []escapeResult
	notes   []string
}

// escapeResult is the outcome of one attempt.
type escapeResult struct {
	name      string
	succeeded bool
	// inconclusive: the attempt gave no verdict (it crashed or hung), which
	// fails the suite as surely as a success, since nothing was proved.
	inconclusive bool
	detail       string
}

func runEscapeSuite(t *testing.T, env *e2eEnv, runtime string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	d := env.start(t)
	c, _ := d.client(t)
	r := &escapeRun{t: t, ctx: ctx, env: env, d: d, c: c, runtime: runtime}

	// The attacker's sandbox, with a small disk when the server bounds disk.
	opts := &sandboxv1.SandboxOptions{Limits: &sandboxv1.ResourceLimits{}}
	diskOpt := setIntField(opts.GetLimits(), "disk_bytes", escapeSandboxDisk)
	acq, err := c.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: "escape-attacker", Options: opts})
	if err != nil {
		t.Fatalf("AcquireSandbox(escape-attacker): %v", err)
	}
	r.attacker = acq.GetSandbox()

	// The victim: another user's sandbox, holding a secret in /workspace,
	// in its command output under /io/out, and in a Python global.
	r.victimSecret = "victim-secret-" + randomHex(t)
	r.victim = acquire(t, ctx, c, "escape-victim").GetSandbox()
	if _, err := upload(ctx, c, r.victim.GetSandboxId(), "secret.txt", []byte(r.victimSecret)); err != nil {
		t.Fatalf("uploading the victim's secret: %v", err)
	}
	mustOK(t, execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: r.victim.GetSandboxId(),
		Code: "victim_secret = open('secret.txt').read()\nprint(victim_secret)"}), "the victim reads its secret")

	// Host-side targets: listeners on the host's Docker bridge address and
	// on its loopback, which sandboxed code must not reach, and files it
	// must not read or change.
	lis := newHostListeners(t)
	hostDir := t.TempDir()
	hostCanary := "host-canary-" + randomHex(t)
	for _, name := range []string{"passwd", "canary"} {
		if err := os.WriteFile(filepath.Join(hostDir, name), []byte(hostCanary+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, sdPort, _ := net.SplitHostPort(d.addr)
	victimDir := filepath.Join(env.stateDir, "sandboxes", r.victim.GetSandboxId())
	pids := r.attacker.GetLimits().GetPidsLimit()
	mem := r.attacker.GetLimits().GetMemoryBytes()
	r.vars = strings.NewReplacer(
		"@BRIDGE_IP@", lis.bridgeIP, "@BRIDGE_PORT@", strconv.Itoa(lis.bridgeTCPPort), "@UDP_PORT@", strconv.Itoa(lis.bridgeUDPPort),
		"@LOOP_PORT@", strconv.Itoa(lis.loopTCPPort), "@SANDBOXD_PORT@", sdPort,
		"@VICTIM_ID@", r.victim.GetSandboxId(), "@VICTIM_WS@", filepath.Join(victimDir, "workspace"), "@VICTIM_IO@", filepath.Join(victimDir, "io"),
		"@HOST_DIR@", hostDir, "@PIDS@", strconv.FormatInt(pids, 10), "@MEMORY_MIB@", strconv.FormatInt(mem>>20, 10),
	)

	// 1. Programs that try from inside.
	for _, a := range escapeAttempts {
		if a.needsBridge && lis.bridgeIP == "" {
			r.notes = append(r.notes, a.name+": not attempted (this host has no docker0 bridge)")
			continue
		}
		r.inSandbox(a, r.victimSecret, hostCanary)
	}
	// 2. The file API, with links the code plants.
	r.fileAPIAttempts(hostDir, hostCanary)
	// 3. Forged files in /io, which the host reads.
	r.ioForgeryAttempts(hostDir, hostCanary)
	// 4. Network egress the server does not allow.
	r.networkOptInAttempt()
	// 5. Resources.
	r.tmpfsAttempt()
	if disk, ok := intField(r.attacker.GetLimits(), "disk_bytes"); ok && disk > 0 {
		r.diskAttempt(disk)
	} else {
		r.notes = append(r.notes, fmt.Sprintf("fill /workspace past its disk limit: not attempted (the server bounds no disk: disk_bytes field present in the API: %v)", diskOpt))
	}
	r.pidsAttempt(pids)
	r.memoryAttempt(mem)

	// Afterwards: nothing reached the host, the victim is intact, and the
	// attacker's sandbox still runs code.
	if n := lis.contacts.Load(); n != 0 {
		r.record("reach the host's listeners (checked on the host)", true, fmt.Sprintf("the host's listeners saw %d connections or packets", n))
	}
	if b, err := os.ReadFile(filepath.Join(hostDir, "canary")); err != nil || string(b) != hostCanary+"\n" {
		r.record("change a host file (checked on the host)", true, fmt.Sprintf("the host canary file now holds %q (%v)", b, err))
	}
	o := execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: r.victim.GetSandboxId(), Code: "victim_secret"})
	if len(o.results) != 1 || o.results[0]["text/plain"] != fmt.Sprintf("'%s'", r.victimSecret) {
		t.Errorf("the victim's global after the suite: results %v, errors %v; want its secret", o.results, o.errs)
	}
	if got := string(download(t, ctx, c, r.victim.GetSandboxId(), "secret.txt")); got != r.victimSecret {
		t.Errorf("the victim's secret.txt after the suite = %q; want it unchanged", got)
	}
	usable := r.usable()

	succeeded, inconclusive := 0, 0
	for _, res := range r.results {
		switch {
		case res.succeeded:
			succeeded++
			t.Errorf("ESCAPE: %s: %s", res.name, res.detail)
		case res.inconclusive:
			inconclusive++
			t.Errorf("no verdict: %s: %s", res.name, res.detail)
		default:
			t.Logf("blocked: %s: %s", res.name, res.detail)
		}
	}
	for _, n := range r.notes {
		t.Logf("note: %s", n)
	}
	yes := map[bool]string{true: "yes", false: "no"}
	line := fmt.Sprintf("escape suite (%s): %d attempts, %d succeeded, sandbox usable afterwards: %s", runtime, len(r.results), succeeded, yes[usable])
	if inconclusive > 0 {
		line += fmt.Sprintf(", %d without a verdict", inconclusive)
	}
	reportSummary(t, "%s", line)
	for _, n := range r.notes {
		reportSummary(t, "  note (%s): %s", runtime, n)
	}
	if !usable {
		t.Errorf("the attacker's sandbox cannot run code after the suite")
	}
	for _, sb := range []*sandboxv1.Sandbox{r.attacker, r.victim} {
		if _, err := c.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SandboxId: sb.GetSandboxId()}); err != nil {
			t.Errorf("DeleteSandbox(%s) after the suite: %v", sb.GetUserId(), err)
		}
	}
	d.stop(t)
}

// usable reports whether the attacker's sandbox still runs Python and bash.
func (r *escapeRun) usable() bool {
	id := r.attacker.GetSandboxId()
	py, err := runCollect(r.ctx, r.c, &sandboxv1.ExecuteRequest{SandboxId: id, Code: "6 * 7"})
	if err != nil || len(py.results) != 1 || py.results[0]["text/plain"] != "42" {
		r.t.Logf("python afterwards: %v, results %v, done %v", err, py.results, py.done)
		return false
	}
	sh, err := runCollect(r.ctx, r.c, &sandboxv1.ExecuteRequest{SandboxId: id, Language: "bash", Code: "echo ok"})
	if err != nil || sh.done.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_OK {
		r.t.Logf("bash afterwards: %v, done %v", err, sh.done)
		return false
	}
	return true
}

func (r *escapeRun) record(name string, succeeded bool, detail string) {
	r.results = append(r.results, escapeResult{name: name, succeeded: succeeded, detail: detail})
}

func (r *escapeRun) recordInconclusive(name, detail string) {
	r.results = append(r.results, escapeResult{name: name, inconclusive: true, detail: detail})
}

// --- attempts from inside ----------------------------------------------------

// escapeAttempt is a program run in a fresh process inside the attacker's
// sandbox (never in the persistent Python kernel, so no attempt changes
// what the next one runs in). It ends by calling succeeded or blocked
// with what it saw.
type escapeAttempt struct {
	name string
	// python: the program is Python (after pyPrelude), else bash (after
	// shPrelude). @NAME@ placeholders are filled in first.
	python bool
	code   string
	// needsBridge: the attempt targets the host's Docker bridge address.
	needsBridge bool
}

const shPrelude = `succeeded() { echo "VERDICT SUCCEEDED $*"; exit 0; }
blocked() { echo "VERDICT BLOCKED $*"; exit 0; }
`

// pyPrelude gives Python attempts their verdict functions and raw system
// calls. DENIED are the errors by which a kernel (Linux with Docker's
// seccomp profile, or gVisor's) refuses for lack of privilege or support;
// any other error means the call got past the privilege check.
const pyPrelude = `import ctypes, errno, glob, json, os, platform, socket, stat, sys, time
libc = ctypes.CDLL(None, use_errno=True)
def succeeded(detail):
    print("VERDICT SUCCEEDED " + detail, flush=True)
    sys.exit(0)
def blocked(detail):
    print("VERDICT BLOCKED " + detail, flush=True)
    sys.exit(0)
def ename(e):
    return errno.errorcode.get(e, str(e)) if isinstance(e, int) else str(e)
DENIED = {errno.EPERM, errno.EACCES, errno.ENOSYS, errno.EROFS}
SYSCALLS = {"x86_64": {"init_module": 175, "finit_module": 313, "bpf": 321},
            "aarch64": {"init_module": 105, "finit_module": 273, "bpf": 280}}[platform.machine()]
def syscall(name, *args):
    ctypes.set_errno(0)
    r = libc.syscall(SYSCALLS[name], *args)
    return r, ctypes.get_errno()
`

// escapeAttempts are the programs that try from inside, one concern each;
// the attempts that need the host's view (the file API, forged /io files,
// resources) are methods of escapeRun.
var escapeAttempts = []escapeAttempt{
	{name: "become root: setuid(0)", python: true, code: `
try:
    os.setuid(0)
except OSError as e:
    blocked(f"setuid(0): {ename(e.errno)}")
succeeded(f"setuid(0) worked: uid {os.getuid()}, euid {os.geteuid()}")
`},
	{name: "become root: su with an empty password", code: `
out=$(timeout 10 su -c 'id -u' root </dev/null 2>&1); rc=$?
[ "$(printf '%s\n' "$out" | tail -n1)" = 0 ] && succeeded "su ran id -u as root"
blocked "su exited $rc: $(printf '%s' "$out" | tr '\n' ' ' | head -c 200)"
`},
	{name: "become root: sudo", code: `
command -v sudo >/dev/null || blocked "sudo is not installed"
out=$(timeout 10 sudo -n id -u </dev/null 2>&1); rc=$?
[ "$out" = 0 ] && succeeded "sudo -n id -u printed 0"
blocked "sudo exited $rc: $(printf '%s' "$out" | tr '\n' ' ' | head -c 200)"
`},
	{name: "become root: a setuid-root binary (mount)", code: `
n=$(find / -xdev -perm -4000 -type f 2>/dev/null | wc -l)
out=$(timeout 10 mount -t tmpfs escape /mnt 2>&1); rc=$?
if [ "$rc" = 0 ] || grep -q ' /mnt ' /proc/self/mountinfo 2>/dev/null; then succeeded "the setuid-root mount binary mounted a tmpfs on /mnt"; fi
blocked "$n setuid-root binaries in the image; mount (one of them) exited $rc: $(printf '%s' "$out" | tr '\n' ' ' | head -c 200)"
`},
	{name: "become root: a user namespace mapping uid 0", python: true, code: `
outer = os.getuid()
if libc.unshare(0x10000000) != 0:  # CLONE_NEWUSER
    blocked(f"unshare(CLONE_NEWUSER): {ename(ctypes.get_errno())}")
mapped = True
try:
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
except OSError:
    pass
try:
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"0 {outer} 1")
except OSError:
    mapped = False
gains = []
try:
    open("/etc/shadow").read()
    gains.append("read /etc/shadow")
except OSError:
    pass
try:
    open("/etc/escape-userns", "w").close()
    gains.append("wrote /etc")
except OSError:
    pass
if gains:
    succeeded("in a new user namespace: " + ", ".join(gains))
blocked(f"unshare(CLONE_NEWUSER) allowed (uid 0 mapped: {mapped}, euid now {os.geteuid()}), but that root owns nothing outside its namespace: /etc/shadow unreadable, / read-only")
`},
	{name: "read a root-only file (/etc/shadow)", python: true, code: `
try:
    data = open("/etc/shadow").read()
except OSError as e:
    blocked(f"open /etc/shadow: {ename(e.errno)}")
succeeded(f"read {len(data)} bytes of /etc/shadow")
`},
	{name: "CAP_CHOWN: give a file to root", python: true, code: `
p = "/workspace/.escape-chown"
open(p, "w").close()
try:
    os.chown(p, 0, 0)
except OSError as e:
    os.remove(p)
    blocked(f"chown to 0:0: {ename(e.errno)}")
os.remove(p)
succeeded("chowned a file to root:root")
`},
	{name: "CAP_FOWNER: change a root-owned file's mode", python: true, code: `
tried = []
for p in ("/tmp", "/etc/passwd", "/"):
    st = os.stat(p)
    if st.st_uid != 0:
        continue
    try:
        os.chmod(p, 0o777)
    except OSError as e:
        tried.append(f"{p}: {ename(e.errno)}")
        continue
    os.chmod(p, stat.S_IMODE(st.st_mode))
    succeeded(f"chmod of root-owned {p}")
if not tried:
    blocked("no root-owned file to try (nothing is root-owned?)")
blocked("chmod " + ", ".join(tried))
`},
	{name: "CAP_NET_RAW: a raw IP socket", python: true, code: `
try:
    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
except OSError as e:
    blocked(f"socket(AF_INET, SOCK_RAW): {ename(e.errno)}")
succeeded("opened a raw IP socket")
`},
	{name: "CAP_NET_RAW: a packet socket", python: true, code: `
try:
    socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
except OSError as e:
    blocked(f"socket(AF_PACKET, SOCK_RAW): {ename(e.errno)}")
succeeded("opened a packet socket")
`},
	{name: "CAP_SYS_ADMIN: mount a tmpfs", python: true, code: `
os.makedirs("/tmp/.escape-mnt", exist_ok=True)
if libc.mount(b"escape", b"/tmp/.escape-mnt", b"tmpfs", 0, None) == 0:
    succeeded("mounted a tmpfs")
blocked(f"mount(tmpfs): {ename(ctypes.get_errno())}")
`},
	{name: "CAP_SYS_ADMIN: remount / read-write", python: true, code: `
MS_REMOUNT = 32
if libc.mount(None, b"/", None, MS_REMOUNT, None) == 0:
    succeeded("remounted / read-write")
blocked(f"mount(MS_REMOUNT, /): {ename(ctypes.get_errno())}")
`},
	{name: "CAP_MKNOD: read host memory through a device node", python: true, code: `
p = "/tmp/.escape-mem"
try:
    os.mknod(p, stat.S_IFCHR | 0o600, os.makedev(1, 1))
except OSError as e:
    blocked(f"mknod c 1 1: {ename(e.errno)}")
try:
    with open(p, "rb") as f:
        data = f.read(16)
except OSError as e:
    os.remove(p)
    blocked(f"mknod c 1 1 allowed (a node in the sandbox's own file system), but opening it fails: {ename(e.errno)}")
os.remove(p)
succeeded(f"read {len(data)} bytes through a /dev/mem device node")
`},
	{name: "CAP_SYS_CHROOT: chroot", python: true, code: `
try:
    os.chroot("/tmp")
except OSError as e:
    blocked(f"chroot: {ename(e.errno)}")
succeeded("chroot worked")
`},
	{name: "CAP_SYS_MODULE: load a kernel module", python: true, code: `
seen = []
for name, args in (("init_module", (None, 0, b"")), ("finit_module", (-1, b"", 0))):
    r, e = syscall(name, *args)
    if r == 0 or e not in DENIED:
        succeeded(f"{name} got past the privilege check ({'returned 0' if r == 0 else ename(e)})")
    seen.append(f"{name}: {ename(e)}")
blocked(", ".join(seen))
`},
	{name: "kernel memory: /dev/mem, /dev/kmem, /dev/port, /proc/kcore", python: true, code: `
seen = []
for p in ("/dev/mem", "/dev/kmem", "/dev/port", "/proc/kcore"):
    try:
        with open(p, "rb") as f:
            data = f.read(16)
    except OSError as e:
        seen.append(f"{p}: {ename(e.errno)}")
        continue
    if data:
        succeeded(f"read {p}")
    seen.append(f"{p}: empty (masked)")
blocked(", ".join(seen))
`},
	{name: "bpf(2): load a kernel program", python: true, code: `
r, e = syscall("bpf", 5, None, 0)  # BPF_PROG_LOAD without attributes
if r >= 0 or e not in DENIED:
    succeeded(f"bpf(BPF_PROG_LOAD) got past the privilege check ({ename(e)})")
blocked(f"bpf(BPF_PROG_LOAD): {ename(e)}")
`},
	{name: "reach the Docker API socket", python: true, code: `
known = ["/var/run/docker.sock", "/run/docker.sock", "/var/run/docker/docker.sock"]
found = [p for p in known if os.path.exists(p)]
for top in ("/run", "/var", "/tmp", "/io", "/workspace", "/mnt", "/media", "/srv", "/home", "/opt", "/root", "/dev"):
    for root, dirs, files in os.walk(top):
        for n in dirs + files:
            p = os.path.join(root, n)
            try:
                if stat.S_ISSOCK(os.lstat(p).st_mode):
                    found.append(p)
            except OSError:
                pass
try:
    abstract = ["\0" + l.split()[-1][1:] for l in open("/proc/net/unix").read().splitlines()[1:] if l.split()[-1].startswith("@")]
except (OSError, IndexError):
    abstract = []
seen = []
for p in found + abstract:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect(p)
        s.sendall(b"GET /version HTTP/1.0\r\n\r\n")
        reply = s.recv(4096)
    except OSError as e:
        seen.append(f"{p!r}: {ename(e.errno) if e.errno else e}")
        continue
    finally:
        s.close()
    if p in known or b"ApiVersion" in reply or b"Docker" in reply:
        succeeded(f"{p!r} answered: {reply[:100]!r}")
    seen.append(f"{p!r}: not Docker")
blocked(f"no Docker socket at {known}; {len(found)} unix sockets in the file system, {len(abstract)} abstract ones: {seen[:5]}")
`},
	{name: "reach containerd's socket", python: true, code: `
cands = ["/run/containerd/containerd.sock", "/var/run/docker/containerd/containerd.sock", "/run/docker/containerd/containerd.sock", "/run/containerd/containerd.sock.ttrpc"]
cands += glob.glob("/run/containerd/s/*") + glob.glob("/run/docker/containerd/*")
seen = []
for p in cands:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect(p)
    except OSError as e:
        seen.append(f"{p}: {ename(e.errno) if e.errno else e}")
        continue
    finally:
        s.close()
    succeeded(f"connected to {p}")
blocked(", ".join(seen))
`},
	{name: "network: an interface besides loopback", python: true, code: `
names = [n for _, n in socket.if_nameindex()]
others = [n for n in names if n != "lo"]
if others:
    succeeded(f"network interfaces besides loopback: {others}")
blocked(f"interfaces: {names}")
`},
	{name: "network: TCP to a listener on the host's bridge address", python: true, needsBridge: true, code: `
s = socket.socket()
s.settimeout(5)
try:
    s.connect(("@BRIDGE_IP@", @BRIDGE_PORT@))
except OSError as e:
    blocked(f"connect @BRIDGE_IP@:@BRIDGE_PORT@: {ename(e.errno) if e.errno else e}")
succeeded("connected to the host's bridge address @BRIDGE_IP@:@BRIDGE_PORT@")
`},
	{name: "network: TCP to the host's loopback (sandboxd's port and a listener)", python: true, code: `
seen = []
for port in (@SANDBOXD_PORT@, @LOOP_PORT@):
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect(("127.0.0.1", port))
    except OSError as e:
        seen.append(f"127.0.0.1:{port}: {ename(e.errno) if e.errno else e}")
        continue
    succeeded(f"connected to 127.0.0.1:{port}, a port the host listens on")
blocked(", ".join(seen) + " (the sandbox's loopback is its own)")
`},
	{name: "network: DNS query to a resolver on the host's bridge address", python: true, needsBridge: true, code: `
query = bytes.fromhex("abcd01000001000000000000") + b"\x07example\x03com\x00\x00\x01\x00\x01"
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(3)
try:
    s.sendto(query, ("@BRIDGE_IP@", @UDP_PORT@))
    data = s.recv(512)
except OSError as e:
    blocked(f"DNS over UDP to @BRIDGE_IP@:@UDP_PORT@: {ename(e.errno) if e.errno else e}")
succeeded(f"the resolver at @BRIDGE_IP@:@UDP_PORT@ answered {len(data)} bytes")
`},
	{name: "write the root file system", python: true, code: `
seen = []
for p, mode in (("/etc/escape", "w"), ("/etc/passwd", "a"), ("/usr/bin/python3", "ab"), ("/usr/lib/python3/dist-packages/escape.py", "w"),
                ("/usr/local/bin/escape", "w"), ("/opt/escape", "w"), ("/var/tmp/escape", "w"), ("/root/escape", "w"), ("/escape", "w")):
    try:
        open(p, mode).close()
    except OSError as e:
        seen.append(f"{p}: {ename(e.errno)}")
        continue
    if mode == "w":
        os.remove(p)
    succeeded(f"opened {p} for writing")
blocked(", ".join(seen))
`},
	{name: "write kernel settings (/proc/sys, /proc/sysrq-trigger, /sys, cgroup release_agent)", python: true, code: `
seen = []
targets = ["/proc/sys/kernel/core_pattern", "/proc/sys/kernel/modprobe", "/proc/sys/vm/drop_caches", "/proc/sysrq-trigger", "/sys/kernel/uevent_helper"]
targets += glob.glob("/sys/fs/cgroup/release_agent") + glob.glob("/sys/fs/cgroup/*/release_agent")
for p in targets:
    try:
        open(p, "w").close()  # opening is the test; nothing is written
    except OSError as e:
        seen.append(f"{p}: {ename(e.errno)}")
        continue
    succeeded(f"opened {p} for writing")
blocked(", ".join(seen))
`},
	{name: "raise the sandbox's own cgroup limits", python: true, code: `
seen = []
for pat in ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/pids/pids.max", "/sys/fs/cgroup/pids.max",
            "/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu.max", "/sys/fs/cgroup/*/*/memory.limit_in_bytes"):
    for p in glob.glob(pat):
        try:
            open(p, "w").close()
        except OSError as e:
            seen.append(f"{p}: {ename(e.errno)}")
            continue
        succeeded(f"opened {p} for writing")
blocked(", ".join(seen) if seen else "no cgroup control files visible")
`},
	{name: "see the host's processes", python: true, code: `
me = os.getuid()
procs, others = [], []
for p in os.listdir("/proc"):
    if not p.isdigit():
        continue
    try:
        uid = os.stat(f"/proc/{p}").st_uid
        comm = open(f"/proc/{p}/comm").read().strip()
    except OSError:
        continue
    procs.append(comm)
    if uid != me:
        others.append(f"{p} {comm} (uid {uid})")
if others:
    succeeded(f"processes of other users are visible: {others[:10]}")
blocked(f"only the sandbox's own {len(procs)} processes are visible: {sorted(set(procs))}")
`},
	{name: "gain privileges by ptracing the driver", python: true, code: `
pid = json.load(open("/io/driver.json"))["pid"]
st = {}
for l in open(f"/proc/{pid}/status"):
    k, _, v = l.partition(":")
    st[k] = v.strip()
ctypes.set_errno(0)
attached = libc.ptrace(16, pid, None, None) == 0  # PTRACE_ATTACH
err = ctypes.get_errno()
if attached:
    os.waitpid(pid, 0)
    libc.ptrace(17, pid, None, None)  # PTRACE_DETACH
privileged = st["CapEff"].strip("0") != "" or st["Uid"].split()[1] != str(os.geteuid())
how = "allowed (same uid)" if attached else f"denied ({ename(err)})"
if attached and privileged:
    succeeded(f"attached to the driver, which has uid {st['Uid']} and capabilities {st['CapEff']}")
blocked(f"ptrace attach to the driver (pid {pid}): {how}; the driver has uid {st['Uid'].split()[1]} and capabilities {st['CapEff']}, nothing the sandboxed code lacks")
`},
	{name: "read another sandbox's /workspace and /io", python: true, code: `
import re
paths = ["@VICTIM_WS@/secret.txt"] + glob.glob("@VICTIM_IO@/out/*") + glob.glob("/*/sandboxes/@VICTIM_ID@/workspace/secret.txt")
for l in open("/proc/self/mountinfo"):
    f = l.split()
    if len(f) > 4 and f[4] in ("/workspace", "/io"):
        host = re.sub(r"sb-[a-z2-7]{20}", "@VICTIM_ID@", f[3])
        paths += [host + "/secret.txt", host + "/out"]
for pid in (p for p in os.listdir("/proc") if p.isdigit()):
    paths += [f"/proc/{pid}/root/workspace/secret.txt", f"/proc/{pid}/root@VICTIM_WS@/secret.txt", f"/proc/{pid}/cwd/secret.txt"]
read = []
for p in paths:
    try:
        if os.path.isdir(p):
            for n in os.listdir(p):
                print(f"READ {p}/{n}: {open(os.path.join(p, n)).read(300)!r}")
        else:
            print(f"READ {p}: {open(p).read(300)!r}")
        read.append(p)
    except OSError:
        pass
blocked(f"tried {len(paths)} paths; readable: {read} (the host checks they hold none of the victim's data)")
`},
}

// program is the bash command that runs an attempt in a fresh process.
func (r *escapeRun) program(a escapeAttempt) string {
	code := r.vars.Replace(a.code)
	if a.python {
		return "python3 - <<'ESCAPE_PY'\n" + pyPrelude + code + "\nESCAPE_PY\n"
	}
	return shPrelude + code
}

// inSandbox runs one attempt in the attacker's sandbox and records its
// verdict. Whatever the program says, it has succeeded if its output holds
// the victim's secret or the host's canary.
func (r *escapeRun) inSandbox(a escapeAttempt, secrets ...string) {
	o, err := runCollect(r.ctx, r.c, &sandboxv1.ExecuteRequest{SandboxId: r.attacker.GetSandboxId(), Language: "bash", Code: r.program(a),
		Timeout: durationpb.New(2 * time.Minute)})
	if err != nil {
		r.recordInconclusive(a.name, fmt.Sprintf("Execute: %v", err))
		return
	}
	stdout := o.stdout
	for _, s := range secrets {
		if strings.Contains(stdout, s) {
			r.record(a.name, true, fmt.Sprintf("the output holds data the sandbox must not see (%q): %s", s, truncateText(stdout, 400)))
			return
		}
	}
	switch verdict := lastVerdict(stdout); {
	case strings.HasPrefix(verdict, "SUCCEEDED "):
		r.record(a.name, true, strings.TrimPrefix(verdict, "SUCCEEDED "))
	case strings.HasPrefix(verdict, "BLOCKED "):
		r.record(a.name, false, strings.TrimPrefix(verdict, "BLOCKED "))
	default:
		r.recordInconclusive(a.name, fmt.Sprintf("no verdict; done %v, stdout %q, stderr %q", o.done, truncateText(stdout, 400), truncateText(o.stderr, 400)))
	}
}

// --- the file API -----------------------------------------------------------

// fileAPIAttempts plants links in the attacker's /workspace that lead to the
// host and to the victim, and uses the file API (which runs on the host, as
// root) through them, including while the code swaps a link back and forth
// to win a race between the host's check and its use.
func (r *escapeRun) fileAPIAttempts(hostDir, hostCanary string) {
	ctx, c, id := r.ctx, r.c, r.attacker.GetSandboxId()
	victimWS := filepath.Join(r.env.stateDir, "sandboxes", r.victim.GetSandboxId(), "workspace")
	plant := fmt.Sprintf(`import os
for name, target in (("shadow", "/etc/shadow"), ("victim_ws", %q), ("hostdir", %q), ("statedir", %q)):
    if os.path.lexists(name):
        os.remove(name)
    os.symlink(target, name)
`, victimWS, hostDir, r.env.stateDir)
	if o, err := runCollect(ctx, c, &sandboxv1.ExecuteRequest{SandboxId: id, Code: plant}); err != nil || o.done.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_OK {
		r.recordInconclusive("file API through planted symlinks", fmt.Sprintf("planting the links failed: %v %v %v", err, o.done, o.errs))
		return
	}
	leaked := func(b []byte) bool {
		return bytes.Contains(b, []byte(hostCanary)) || bytes.Contains(b, []byte(r.victimSecret))
	}

	got, err := tryDownload(ctx, c, id, "shadow")
	r.record("DownloadFile through a link to the host's /etc/shadow", err == nil || len(got) > 0,
		fmt.Sprintf("%d bytes, %v", len(got), err))

	got, err = tryDownload(ctx, c, id, "victim_ws/secret.txt")
	r.record("DownloadFile through a link to another sandbox's /workspace", leaked(got) || err == nil,
		fmt.Sprintf("%d bytes, %v", len(got), err))

	got, err = tryDownload(ctx, c, id, "hostdir/canary")
	r.record("DownloadFile through a link to a host directory", leaked(got) || err == nil,
		fmt.Sprintf("%d bytes, %v", len(got), err))

	_, err = upload(ctx, c, id, "hostdir/escape.txt", []byte("escaped"))
	_, serr := os.Lstat(filepath.Join(hostDir, "escape.txt"))
	r.record("UploadFile through a link to a host directory", err == nil || serr == nil,
		fmt.Sprintf("upload: %v; on the host: %v", err, serr))

	lf, err := c.ListFiles(ctx, &sandboxv1.ListFilesRequest{SandboxId: id, Path: "statedir"})
	r.record("ListFiles through a link to sandboxd's state directory", err == nil || len(lf.GetFiles()) > 0,
		fmt.Sprintf("%d entries, %v", len(lf.GetFiles()), err))

	// The race: a thread in the kernel flips race -> race_real (a directory
	// in the workspace) and race -> the host directory, as fast as it can,
	// while the host downloads and uploads through it.
	race := fmt.Sprintf(`import os, threading
os.makedirs("race_real", exist_ok=True)
with open("race_real/passwd", "w") as f:
    f.write("sandbox-owned\n")
_race_stop = False
def _race():
    targets, i = ("race_real", %q), 0
    while not _race_stop:
        i += 1
        try:
            os.symlink(targets[i %% 2], ".race.tmp")
            os.replace(".race.tmp", "race")
        except OSError:
            pass
_race_thread = threading.Thread(target=_race, daemon=True)
_race_thread.start()
`, hostDir)
	if o, err := runCollect(ctx, c, &sandboxv1.ExecuteRequest{SandboxId: id, Code: race}); err != nil || o.done.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_OK {
		r.recordInconclusive("file API while the code swaps a link (race)", fmt.Sprintf("starting the swapper failed: %v %v %v", err, o.done, o.errs))
		return
	}
	const rounds = 200
	var inside, refused, leaks, uploads int
	for i := range rounds {
		got, err := tryDownload(ctx, c, id, "race/passwd")
		switch {
		case leaked(got):
			leaks++
		case err == nil:
			inside++
		default:
			refused++
		}
		if _, err := upload(ctx, c, id, fmt.Sprintf("race/up-%d.txt", i), []byte("x")); err == nil {
			uploads++
		}
	}
	stop := "_race_stop = True\n_race_thread.join()\nimport glob, os, shutil\nfor p in glob.glob('race*') + glob.glob('.race*'):\n    shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.remove(p)"
	switch o, err := runCollect(ctx, c, &sandboxv1.ExecuteRequest{SandboxId: id, Code: stop}); {
	case err == nil && o.done.GetStatus() == sandboxv1.CommandStatus_COMMAND_STATUS_OK:
	case err == nil && o.done.GetStateLost():
		// The clean-up is not an attempt: a runtime that restarts the
		// sandbox under it (seen once under runsc, container exit code 2)
		// leaks nothing, and the records above are already taken.
		r.notes = append(r.notes, "race: the sandbox restarted while the link swapper was being stopped: "+o.done.GetReason())
	default:
		r.t.Errorf("stopping the link swapper: %v %v %v", err, o.done, o.errs)
	}
	hostEntries, _ := filepath.Glob(filepath.Join(hostDir, "up-*"))
	r.record("DownloadFile while the code swaps a link to a host directory (race)", leaks > 0,
		fmt.Sprintf("%d downloads: %d served the workspace's own file, %d refused, %d leaked the host's", rounds, inside, refused, leaks))
	r.record("UploadFile while the code swaps a link to a host directory (race)", len(hostEntries) > 0,
		fmt.Sprintf("%d uploads: %d stored in the workspace, %d files landed on the host", rounds, uploads, len(hostEntries)))
	if inside == 0 {
		r.notes = append(r.notes, "race: no download went through the in-workspace link; the swap may not have run")
	}
}

// --- forged /io files --------------------------------------------------------

// ioForgeryAttempts: the sandbox user owns /io, so sandboxed code can replace
// anything the driver writes there, and the host reads it. In a throwaway
// sandbox (the last attempt breaks it on purpose), code plants events files,
// artifacts and a command log that lead to a host file, then asks for the
// commands they pretend to answer.
func (r *escapeRun) ioForgeryAttempts(hostDir, hostCanary string) {
	ctx, c := r.ctx, r.c
	sb := acquire(r.t, ctx, c, "escape-io").GetSandbox()
	id := sb.GetSandboxId()
	defer deleteQuietly(c, id)
	hostFile := filepath.Join(hostDir, "canary")
	ev := func(fields string) string { return `json.dumps({` + fields + `}) + "\n"` }
	plant := fmt.Sprintf(`import json, os
os.symlink(%[1]q, "/io/out/forged-link.events")
with open("/io/out/forged-refs.events", "w") as f:
    f.write(%[2]s + %[3]s + %[4]s)
os.symlink(%[1]q, "/io/out/forged-art.2.1")
with open("/io/out/forged-art.events", "w") as f:
    f.write(%[5]s + %[6]s + %[4]s)
`, hostFile,
		ev(`"seq": 1, "type": "started", "command_id": "forged-refs"`),
		ev(fmt.Sprintf(`"seq": 2, "type": "display", "data": {"text/plain": "x"}, "refs": {"text/html": "../../../../../../../..%s", "text/markdown": %q}`, hostFile, hostFile)),
		ev(`"seq": 3, "type": "done", "status": "ok"`),
		ev(`"seq": 1, "type": "started", "command_id": "forged-art"`),
		ev(`"seq": 2, "type": "display", "data": {"text/plain": "x"}, "refs": {"text/html": "forged-art.2.1"}`))
	if o, err := runCollect(ctx, c, &sandboxv1.ExecuteRequest{SandboxId: id, Code: plant}); err != nil || o.done.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_OK {
		r.recordInconclusive("forged /io files", fmt.Sprintf("planting failed: %v %v %v %q", err, o.done, o.errs, o.stderr))
		return
	}
	for _, f := range []struct{ cmd, name string }{
		{"forged-link", "forged events file: a link to a host file"},
		{"forged-refs", "forged event whose artifacts name host paths"},
		{"forged-art", "forged artifact: a link to a host file"},
	} {
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		s, err := c.Execute(cctx, &sandboxv1.ExecuteRequest{SandboxId: id, CommandId: f.cmd, Code: "print('ran')"})
		var evs []*sandboxv1.ExecuteEvent
		if err == nil {
			evs, err = recvEvents(s)
		}
		cancel()
		all := fmt.Sprint(evs)
		r.record(f.name, strings.Contains(all, hostCanary),
			fmt.Sprintf("%d events without host data, then %v", len(evs), err))
	}

	// The command log: replaced by a link to a host file, which the host
	// must refuse to append the next command to.
	replace := fmt.Sprintf("import os\nos.rename('/io/stdin', '/io/stdin.orig')\nos.symlink(%q, '/io/stdin')", hostFile)
	if o, err := runCollect(ctx, c, &sandboxv1.ExecuteRequest{SandboxId: id, Code: replace}); err != nil || o.done.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_OK {
		r.recordInconclusive("forged command log", fmt.Sprintf("replacing /io/stdin failed: %v %v %v", err, o.done, o.errs))
		return
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	_, err := runCollect(cctx, c, &sandboxv1.ExecuteRequest{SandboxId: id, Code: "print('next')"})
	cancel()
	b, rerr := os.ReadFile(hostFile)
	r.record("command log replaced by a link to a host file", rerr != nil || string(b) != hostCanary+"\n",
		fmt.Sprintf("the next Execute: %v; the host file is unchanged: %v", err, rerr == nil && string(b) == hostCanary+"\n"))
	if status.Code(err) != codes.FailedPrecondition {
		r.t.Errorf("Execute in a sandbox whose command log was replaced: %v; want FailedPrecondition saying the sandbox is unusable", err)
	}
}

// --- network opt-in ----------------------------------------------------------

// networkOptInAttempt asks for network egress from a server not started to
// allow it, when the API has the option.
func (r *escapeRun) networkOptInAttempt() {
	opts := &sandboxv1.SandboxOptions{}
	if !setBoolField(opts, "network", true) {
		r.notes = append(r.notes, "ask for network egress the server does not allow: not attempted (the API has no network option)")
		return
	}
	resp, err := r.c.AcquireSandbox(r.ctx, &sandboxv1.AcquireSandboxRequest{UserId: "escape-net", Options: opts})
	if err != nil {
		r.record("ask for network egress the server does not allow", false, fmt.Sprintf("AcquireSandbox: %v", err))
		if status.Code(err) != codes.InvalidArgument {
			r.t.Errorf("AcquireSandbox with network from a server without --allow-network: %v; want InvalidArgument", err)
		}
		return
	}
	defer deleteQuietly(r.c, resp.GetSandbox().GetSandboxId())
	o, err := runCollect(r.ctx, r.c, &sandboxv1.ExecuteRequest{SandboxId: resp.GetSandbox().GetSandboxId(),
		Code: "import socket\nprint([n for _, n in socket.if_nameindex() if n != 'lo'])"})
	r.record("ask for network egress the server does not allow", err != nil || strings.TrimSpace(o.stdout) != "[]",
		fmt.Sprintf("the server granted the sandbox; its interfaces besides lo: %q (%v)", o.stdout, err))
}

// --- resources -----------------------------------------------------------------

// tmpfsAttempt writes twice the size of /tmp (a tmpfs the container spec
// bounds) and succeeds if it all fits.
func (r *escapeRun) tmpfsAttempt() {
	r.inSandbox(escapeAttempt{name: "fill /tmp past its size", python: true, code: `
size = os.statvfs("/tmp").f_blocks * os.statvfs("/tmp").f_frsize
chunk, n, err = b"\0" * (4 << 20), 0, None
try:
    with open("/tmp/.escape-fill", "wb") as f:
        while n < 2 * size:
            f.write(chunk)
            f.flush()
            n += len(chunk)
except OSError as e:
    err = e
finally:
    os.remove("/tmp/.escape-fill")
if err is None:
    succeeded(f"wrote {n >> 20} MiB into a {size >> 20} MiB /tmp")
blocked(f"{ename(err.errno)} after {n >> 20} MiB of a {size >> 20} MiB /tmp")
`})
}

// diskAttempt writes past the sandbox's disk limit.
func (r *escapeRun) diskAttempt(disk int64) {
	r.inSandbox(escapeAttempt{name: "fill /workspace past its disk limit", python: true, code: fmt.Sprintf(`
limit = %d
chunk, n, err = b"\1" * (4 << 20), 0, None
try:
    with open("/workspace/.escape-fill", "wb") as f:
        while n < limit + (64 << 20):
            f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
            n += len(chunk)
except OSError as e:
    err = e
finally:
    os.remove("/workspace/.escape-fill")
if err is None or n > limit:
    succeeded(f"wrote {n >> 20} MiB with a {limit >> 20} MiB limit ({err})")
blocked(f"{ename(err.errno)} ({err.strerror}) after {n >> 20} MiB of {limit >> 20} MiB")
`, disk)})
}

// pidsAttempt forks until the kernel refuses, holds the children while the
// host checks that sandboxd and another sandbox still answer, then ends.
// Under gVisor the sandbox's host-side process may die instead of the fork
// failing; that contains the bomb too (the container restarts, its state
// is lost), and the suite notes it.
func (r *escapeRun) pidsAttempt(limit int64) {
	const name = "exhaust pids: a bounded fork bomb"
	id := r.attacker.GetSandboxId()
	code := r.program(escapeAttempt{python: true, code: fmt.Sprintf(`
import signal
limit = %d
kids, err = [], None
for _ in range(2 * limit):
    try:
        pid = os.fork()
    except OSError as e:
        err = e
        break
    if pid == 0:
        signal.pause()
        os._exit(0)
    kids.append(pid)
print(f"FORKED {len(kids)} {err}", flush=True)
deadline = time.time() + 120
while not os.path.exists("/workspace/.escape-release") and time.time() < deadline:
    time.sleep(0.1)
for p in kids:
    os.kill(p, 9)
for p in kids:
    os.waitpid(p, 0)
os.remove("/workspace/.escape-release")
if len(kids) >= limit:
    succeeded(f"forked {len(kids)} processes with a limit of {limit}")
blocked(f"fork failed after {len(kids)} children ({ename(err.errno) if err else 'no error'}) with a limit of {limit}")
`, limit)})
	ctx, cancel := context.WithTimeout(r.ctx, 3*time.Minute)
	defer cancel()
	s, err := r.c.Execute(ctx, &sandboxv1.ExecuteRequest{SandboxId: id, Language: "bash", Code: code, Timeout: durationpb.New(2 * time.Minute)})
	if err != nil {
		r.recordInconclusive(name, fmt.Sprintf("Execute: %v", err))
		return
	}
	var stdout string
	var done *sandboxv1.Done
	checked := false
	for done == nil {
		ev, err := s.Recv()
		if err != nil {
			r.recordInconclusive(name, fmt.Sprintf("the stream broke: %v (stdout so far %q)", err, stdout))
			return
		}
		stdout += ev.GetStdout().GetText()
		done = ev.GetDone()
		if !checked && (strings.Contains(stdout, "FORKED ") || done != nil) {
			checked = true
			r.othersResponsive("while the fork bomb holds its processes")
			if done == nil {
				if _, err := upload(ctx, r.c, id, ".escape-release", nil); err != nil {
					r.t.Errorf("releasing the fork bomb (UploadFile while the sandbox is out of pids): %v", err)
				}
			}
		}
	}
	verdict := lastVerdict(stdout)
	switch {
	case strings.HasPrefix(verdict, "SUCCEEDED "):
		r.record(name, true, strings.TrimPrefix(verdict, "SUCCEEDED "))
	case strings.HasPrefix(verdict, "BLOCKED "):
		r.record(name, false, strings.TrimPrefix(verdict, "BLOCKED "))
	case done.GetStatus() == sandboxv1.CommandStatus_COMMAND_STATUS_KILLED && done.GetStateLost():
		r.record(name, false, fmt.Sprintf("the runtime contained it by restarting the sandbox: done %s: %s", done.GetStatus(), done.GetReason()))
		r.notes = append(r.notes, fmt.Sprintf("a fork bomb restarts the whole sandbox under %s (state lost: %s) rather than failing fork with EAGAIN", r.runtime, done.GetReason()))
	default:
		r.recordInconclusive(name, fmt.Sprintf("no verdict; done %v, stdout %q", done, truncateText(stdout, 400)))
	}
}

// memoryAttempt allocates (and touches) twice the sandbox's memory limit.
// The command must be killed with a reason that names memory, and the
// sandbox must work on with a fresh interpreter.
func (r *escapeRun) memoryAttempt(limit int64) {
	const name = "exhaust memory: allocate twice the limit"
	id := r.attacker.GetSandboxId()
	code := allocatePython(2*limit/(16<<20), 16)
	o, err := runCollect(r.ctx, r.c, &sandboxv1.ExecuteRequest{SandboxId: id, Code: code, Timeout: durationpb.New(2 * time.Minute)})
	if err != nil {
		r.recordInconclusive(name, fmt.Sprintf("Execute: %v", err))
		return
	}
	out := o.stdout
	if strings.Contains(out, "ALLOCATED") {
		r.record(name, true, strings.TrimSpace(out))
		return
	}
	r.record(name, false, fmt.Sprintf("done %s, state lost %v: %s", o.done.GetStatus(), o.done.GetStateLost(), o.done.GetReason()))
	if o.done.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_KILLED || !o.done.GetStateLost() {
		r.t.Errorf("allocating past the memory limit: done %v, errors %v; want KILLED with state_lost", o.done, o.errs)
	}
	if !strings.Contains(o.done.GetReason(), "memory") {
		msg := fmt.Sprintf("allocating past the memory limit under %s ends with reason %q, which does not name memory", r.runtime, o.done.GetReason())
		if r.runtime == "runc" {
			r.t.Error(msg)
		} else {
			// gVisor: the memory limit bounds the whole sandbox, whose
			// restart is all the driver can see.
			r.notes = append(r.notes, msg)
		}
	}
}

// othersResponsive checks, while the attacker's sandbox is exhausted, that
// sandboxd answers and another user's sandbox runs code.
func (r *escapeRun) othersResponsive(when string) {
	ctx, cancel := context.WithTimeout(r.ctx, 2*time.Minute)
	defer cancel()
	if _, err := r.c.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SandboxId: r.attacker.GetSandboxId()}); err != nil {
		r.t.Errorf("%s: GetSandbox: %v", when, err)
	}
	o, err := runCollect(ctx, r.c, &sandboxv1.ExecuteRequest{SandboxId: r.victim.GetSandboxId(), Code: "6 * 7"})
	if err != nil || len(o.results) != 1 || o.results[0]["text/plain"] != "42" {
		r.t.Errorf("%s: another sandbox did not run 6 * 7: %v, results %v, done %v", when, err, o.results, o.done)
	}
}

// --- host listeners ------------------------------------------------------------

// hostListeners are the host's services the sandbox must not reach: TCP on
// the Docker bridge address and on loopback, and a UDP "resolver" on the
// bridge address that answers anything. contacts counts what reached them.
type hostListeners struct {
	bridgeIP                                  string
	bridgeTCPPort, bridgeUDPPort, loopTCPPort int
	contacts                                  atomic.Int64
}

func newHostListeners(t *testing.T) *hostListeners {
	h := &hostListeners{bridgeIP: bridgeAddress(t)}
	listenTCP := func(ip string) int {
		l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			t.Fatalf("listening on %s: %v", ip, err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				conn, err := l.Accept()
				if err != nil {
					return
				}
				h.contacts.Add(1)
				conn.Close()
			}
		}()
		return l.Addr().(*net.TCPAddr).Port
	}
	h.loopTCPPort = listenTCP("127.0.0.1")
	if h.bridgeIP == "" {
		return h
	}
	h.bridgeTCPPort = listenTCP(h.bridgeIP)
	pc, err := net.ListenPacket("udp", net.JoinHostPort(h.bridgeIP, "0"))
	if err != nil {
		t.Fatalf("listening on udp %s: %v", h.bridgeIP, err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			h.contacts.Add(1)
			pc.WriteTo(buf[:n], from)
		}
	}()
	h.bridgeUDPPort = pc.LocalAddr().(*net.UDPAddr).Port
	return h
}

// bridgeAddress is the host's IPv4 address on Docker's default bridge, or ""
// when there is none (CI requires one).
func bridgeAddress(t *testing.T) string {
	ifc, err := net.InterfaceByName("docker0")
	if err == nil {
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
				return ipn.IP.String()
			}
		}
	}
	if testenv.InCI() {
		t.Fatalf("CI=true and the host has no docker0 bridge address (%v): the network attempts need it", err)
	}
	return ""
}

// --- small helpers ---------------------------------------------------------------

// lastVerdict is what follows "VERDICT " on the last such line of an
// attempt's output ("SUCCEEDED ..." or "BLOCKED ..."), or "".
func lastVerdict(stdout string) string {
	v := ""
	for _, l := range strings.Split(stdout, "\n") {
		if s, ok := strings.CutPrefix(l, "VERDICT "); ok {
			v = s
		}
	}
	return v
}

func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func randomHex(t *testing.T) string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
