// Notebook-style Java kernel for the sandbox driver, on JShell.
//
// Started by the Go driver as `java [options] Kernel.java` (the single-file
// source launcher) and speaking the same kernel protocol as the Python
// kernel (driver/pykernel/kernel.py): fd 0 = /dev/null, fd 1/2 = the user's
// raw stdout/stderr pipes, fd 3 = control in (first a hello {"nonce"}, then
// one JSON request per line: {"id", "code", "language", "env", "setenv"}:
// env is set for the request only, setenv for good before it, the
// sandbox's environment), fd 4 = control out (one JSON message per line:
// ready / result / error / done). Before every message that carries
// "sync": N, the marker "\x00\x1eSBX-SYNC:<nonce>:<N>\x1e\x00" is written to
// fd 1 and fd 2, after all output written before it.
//
// A cell is cut into snippets by JShell's source analysis and each is
// evaluated in one JShell whose execution engine is local: snippets run in
// this JVM, so variables, methods, classes and imports outlive the cell,
// and System.out and System.err (unbuffered here, so output and markers
// keep their order) are the pipes. The value of the cell's last snippet,
// when it is an expression (JShell's $N, or a variable named alone), is
// the cell's result, as JShell shows it. A snippet that does not compile
// ends the cell with a CompilationError (javac's diagnostics, lines of the
// cell); an exception ends it with an error named by the exception's
// class, with the stack trace (snippet frames as <cell-N>:line).
//
// A timeout or an interrupt (the driver's SIGINT, then a request
// {"id", "op": "interrupt"} on fd 3, read while the cell runs) stops the
// running snippet with JShell.stop() (the snippet's thread is stopped);
// the cell ends with an Interrupted error and the definitions are kept.
// SIGINT itself is ignored: the JVM would run its handler late, maybe in
// the next cell. An interrupt for a command not running is ignored.
// Snippets see the request's environment: System.getenv (the JVM's map is
// updated in place, which needs --add-opens java.base/java.util=ALL-UNNAMED)
// and the processes they start (the C library's environment is updated with
// setenv through JDK 17's jdk.incubator.foreign, when the driver added it:
// --add-modules jdk.incubator.foreign --enable-native-access=ALL-UNNAMED).
import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.PrintStream;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodType;
import java.lang.reflect.Array;
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.stream.Collectors;

import jdk.jshell.DeclarationSnippet;
import jdk.jshell.Diag;
import jdk.jshell.EvalException;
import jdk.jshell.JShell;
import jdk.jshell.JShellException;
import jdk.jshell.Snippet;
import jdk.jshell.SnippetEvent;
import jdk.jshell.SourceCodeAnalysis;
import jdk.jshell.UnresolvedReferenceException;

public class Kernel {
    static final int MAX_PLAIN = 1 << 20;
    static final OutputStream OUT1 = new FileOutputStream(FileDescriptor.out);
    static final OutputStream OUT2 = new FileOutputStream(FileDescriptor.err);
    static OutputStream ctlOut;
    static String nonce = "";
    static long sync = 0;
    static String curId = null;
    static int cell = 0;
    static JShell shell;
    // running is set while a cell runs; interrupted once a SIGINT reached
    // it. RUN_LOCK orders them with cell, the cell a SIGINT is for.
    static final Object RUN_LOCK = new Object();
    static volatile boolean running = false;
    static volatile boolean interrupted = false;
    static String runningId = null;
    // Where each snippet came from, for stack traces: its cell and the line
    // of the cell it starts on.
    static final Map<String, int[]> origins = new HashMap<>();
    static Map<String, String> envMap;

    public static void main(String[] args) throws Exception {
        // Unbuffered: every print is a write, so the markers written after it
        // follow it in the pipe.
        System.setOut(new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8));
        System.setErr(new PrintStream(new FileOutputStream(FileDescriptor.err), true, StandardCharsets.UTF_8));
        // Installed first: SIGINT must not end the JVM. It stops nothing
        // either: the JVM runs a signal's handler later, on a thread of its
        // own, when the cell it was for may have ended and the next begun.
        // The driver follows its SIGINT with an interrupt request naming the
        // command, which stops that command only.
        sun.misc.Signal.handle(new sun.misc.Signal("INT"), sig -> {});
        BufferedReader in = new BufferedReader(new InputStreamReader(new FileInputStream("/dev/fd/3"), StandardCharsets.UTF_8));
        ctlOut = new FileOutputStream("/dev/fd/4");
        String hello = in.readLine();
        try {
            Object n = ((Map<?, ?>) new Json(hello).value()).get("nonce");
            if (!(n instanceof String s) || !s.matches("[0-9a-f]{16,}")) throw new IllegalArgumentException();
            nonce = s;
        } catch (RuntimeException e) {
            System.exit(2); // not started by the driver
        }
        envMap = writableEnv();
        shell = JShell.builder().executionEngine("local").out(System.out).err(System.err).build();
        // Requests are read as they come, so an interrupt reaches the cell
        // while it runs; the others wait their turn.
        LinkedBlockingQueue<Optional<String>> lines = new LinkedBlockingQueue<>();
        Thread reader = new Thread(() -> {
            try {
                for (String l; (l = in.readLine()) != null;) {
                    if (!interruptRequest(l)) lines.add(Optional.of(l));
                }
            } catch (IOException e) {
                // As closed.
            }
            lines.add(Optional.empty());
        }, "sandboxd-requests");
        reader.setDaemon(true);
        reader.start();
        writeCtl("{\"type\":\"ready\",\"pid\":" + ProcessHandle.current().pid() + "}\n");
        for (;;) {
            String line = lines.take().orElse(null);
            if (line == null) System.exit(0); // the driver closed fd 3
            if (line.isBlank()) continue;
            Map<?, ?> req;
            try {
                req = parseRequest(line);
            } catch (RuntimeException e) {
                var m = java.util.regex.Pattern.compile("\"id\"\\s*:\\s*\"([A-Za-z0-9._-]*)\"").matcher(line);
                curId = m.find() ? m.group(1) : "";
                send("error", "\"ename\":\"ProtocolError\",\"evalue\":" + jstr("bad request: " + e.getMessage()) + ",\"traceback\":[]", false);
                send("done", "\"status\":\"error\"", true);
                continue;
            }
            run(req);
        }
    }

    // interruptRequest handles {"id", "op": "interrupt"}: the running cell,
    // when it is that command's, is stopped. It reports whether line was one.
    static boolean interruptRequest(String line) {
        if (!line.contains("\"interrupt\"")) return false;
        String id;
        try {
            if (!(new Json(line).value() instanceof Map<?, ?> m) || !"interrupt".equals(m.get("op")) || !(m.get("id") instanceof String i)) return false;
            id = i;
        } catch (RuntimeException e) {
            return false;
        }
        Thread t = new Thread(() -> onInterrupt(id), "sandboxd-interrupt");
        t.setDaemon(true);
        t.start();
        return true;
    }

    static void onInterrupt(String id) {
        int gen;
        synchronized (RUN_LOCK) {
            if (!running || !id.equals(runningId)) return;
            gen = cell;
            interrupted = true;
        }
        // A SIGINT while the snippet compiles finds nothing to stop: try
        // until the cell ends; never past it, into the next one.
        for (;;) {
            synchronized (RUN_LOCK) {
                if (!running || cell != gen) return;
                shell.stop();
            }
            try {
                Thread.sleep(20);
            } catch (InterruptedException e) {
                return;
            }
        }
    }

    static Map<?, ?> parseRequest(String line) {
        Object v = new Json(line).value();
        if (!(v instanceof Map<?, ?> m)) throw new IllegalArgumentException("not an object");
        if (!(m.get("id") instanceof String) || !(m.get("code") instanceof String)) {
            throw new IllegalArgumentException("'id' and 'code' must be strings");
        }
        for (String key : new String[] {"env", "setenv"}) {
            Object e = m.get(key);
            if (e == null) continue;
            if (!(e instanceof Map<?, ?> em) || !em.values().stream().allMatch(x -> x instanceof String)) {
                throw new IllegalArgumentException("'" + key + "' must map strings to strings");
            }
        }
        return m;
    }

    @SuppressWarnings("unchecked")
    static void run(Map<?, ?> req) {
        curId = (String) req.get("id");
        cell++;
        setEnv((Map<String, String>) req.get("setenv")); // for good
        Map<String, String> saved = setEnv((Map<String, String>) req.get("env"));
        String status = "ok";
        synchronized (RUN_LOCK) {
            interrupted = false;
            running = true;
            runningId = curId;
        }
        try {
            if (!runCell((String) req.get("code"))) status = "error";
        } catch (Throwable t) {
            status = "error";
            sendError(t.getClass().getName(), String.valueOf(t.getMessage()), List.of());
        } finally {
            synchronized (RUN_LOCK) {
                running = false;
            }
        }
        if (interrupted && status.equals("ok")) {
            // Stopped between the last snippet's end and the cell's.
            status = "error";
            sendInterrupted();
        }
        restoreEnv(saved);
        // Like Jupyter's execution_count: cells run by this kernel, this one
        // included.
        send("done", "\"status\":" + jstr(status) + ",\"execution_count\":" + cell, true);
    }

    // runCell evaluates the cell's snippets in order; it reports the first
    // failure and returns false then.
    static boolean runCell(String code) {
        SourceCodeAnalysis sca = shell.sourceCodeAnalysis();
        String rem = code;
        int offset = 0;
        SnippetEvent last = null;
        while (!rem.isBlank()) {
            if (interrupted) {
                sendInterrupted();
                return false;
            }
            SourceCodeAnalysis.CompletionInfo ci = sca.analyzeCompletion(rem);
            String src = ci.source();
            String next = ci.remaining();
            if (src == null || next == null || !ci.completeness().isComplete() && ci.completeness() != SourceCodeAnalysis.Completeness.UNKNOWN) {
                // Incomplete (an unclosed brace...): compiled as it is, for
                // javac's message.
                src = rem;
                next = "";
            }
            // Lines are counted from the snippet's first character.
            src = src.stripLeading();
            int consumed = rem.length() - next.length();
            int lead = 0;
            while (lead < consumed && Character.isWhitespace(rem.charAt(lead))) lead++;
            int startLine = lineOf(code, offset + lead);
            offset += consumed;
            rem = next;
            List<SnippetEvent> events = shell.eval(src);
            SnippetEvent ev = null;
            for (SnippetEvent e : events) {
                if (e.causeSnippet() == null) {
                    ev = e;
                    break;
                }
            }
            if (ev == null) continue;
            Snippet sn = ev.snippet();
            origins.put(sn.id(), new int[] {cell, startLine});
            if (interrupted) {
                sendInterrupted();
                return false;
            }
            if (ev.status() == Snippet.Status.REJECTED) {
                reportCompile(sn, src, startLine);
                return false;
            }
            if (ev.exception() != null) {
                reportException(ev.exception());
                return false;
            }
            last = ev;
        }
        if (last != null && hasResult(last.snippet()) && last.value() != null) {
            send("result", "\"data\":{\"text/plain\":" + jstr(trunc(last.value())) + "}", false);
        }
        return true;
    }

    // hasResult: an expression's value is the cell's result, not a
    // declaration's, an assignment's or a statement's.
    static boolean hasResult(Snippet s) {
        return switch (s.subKind()) {
            case TEMP_VAR_EXPRESSION_SUBKIND, VAR_VALUE_SUBKIND, OTHER_EXPRESSION_SUBKIND -> true;
            default -> false;
        };
    }

    static int lineOf(String s, int pos) {
        int n = 1;
        for (int i = 0; i < pos && i < s.length(); i++) {
            if (s.charAt(i) == '\n') n++;
        }
        return n;
    }

    static void reportCompile(Snippet sn, String src, int startLine) {
        List<String> tb = new ArrayList<>();
        String first = null;
        for (Diag d : shell.diagnostics(sn).collect(Collectors.toList())) {
            if (!d.isError()) continue;
            List<String> msg = new ArrayList<>();
            for (String l : d.getMessage(Locale.ROOT).split("\n")) {
                // JShell's wrapper class has no name: "location: class ".
                if (!l.strip().equals("location: class")) msg.add(l);
            }
            if (msg.isEmpty()) msg.add("error");
            long pos = d.getPosition() >= 0 ? d.getPosition() : d.getStartPosition();
            int line = 1, col = 0, ls = 0;
            for (int i = 0; i < pos && i < src.length(); i++) {
                if (src.charAt(i) == '\n') {
                    line++;
                    ls = i + 1;
                }
            }
            col = (int) Math.max(0, Math.min(pos, src.length()) - ls);
            int le = src.indexOf('\n', ls);
            String text = src.substring(ls, le < 0 ? src.length() : le);
            StringBuilder b = new StringBuilder();
            b.append("<cell-").append(cell).append(">:").append(startLine + line - 1).append(": error: ").append(msg.get(0)).append('\n');
            b.append(text).append('\n').append(" ".repeat(Math.min(col, text.length()))).append("^\n");
            for (String l : msg.subList(1, msg.size())) b.append(l).append('\n');
            tb.add(b.toString());
            if (first == null) {
                first = msg.get(0);
                if (msg.size() > 1) first += " (" + msg.subList(1, msg.size()).stream().map(String::strip).map(l -> l.replaceAll("\\s+", " ")).collect(Collectors.joining(", ")) + ")";
            }
        }
        if (first == null) first = "the snippet was rejected: " + src.strip();
        sendError("CompilationError", first, tb);
    }

    static void reportException(JShellException ex) {
        if (ex instanceof UnresolvedReferenceException ure) {
            DeclarationSnippet ds = ure.getSnippet();
            String deps = shell.unresolvedDependencies(ds).collect(Collectors.joining(", "));
            String msg = ds.name() + " cannot be used until " + (deps.isEmpty() ? "its references are" : deps + " " + (deps.contains(",") ? "are" : "is")) + " declared";
            List<String> tb = new ArrayList<>();
            tb.add("UnresolvedReferenceException: " + msg + "\n");
            frames(ex.getStackTrace(), tb);
            sendError("UnresolvedReferenceException", msg, tb);
            return;
        }
        String cls = ex instanceof EvalException ee ? ee.getExceptionClassName() : ex.getClass().getName();
        String msg = ex.getMessage() == null ? "" : ex.getMessage();
        List<String> tb = new ArrayList<>();
        Throwable t = ex;
        String prefix = "";
        for (int depth = 0; t != null && depth < 20; depth++) {
            String c = t instanceof EvalException e ? e.getExceptionClassName() : t.getClass().getName();
            tb.add(prefix + c + (t.getMessage() == null ? "" : ": " + t.getMessage()) + "\n");
            frames(t.getStackTrace(), tb);
            prefix = "Caused by: ";
            t = t.getCause();
        }
        sendError(cls, msg, tb);
    }

    // frames renders stack frames like Java does, a snippet's as
    // <cell-N>:line (JShell names its file #id).
    static void frames(StackTraceElement[] st, List<String> tb) {
        for (StackTraceElement f : st) {
            String where = f.getClassName().isEmpty() ? f.getMethodName() : f.getClassName() + (f.getMethodName().isEmpty() ? "" : "." + f.getMethodName());
            String file = f.getFileName();
            String loc;
            if (file != null && file.startsWith("#") && origins.containsKey(file.substring(1))) {
                int[] o = origins.get(file.substring(1));
                loc = "<cell-" + o[0] + ">" + (f.getLineNumber() > 0 ? ":" + (o[1] + f.getLineNumber() - 1) : "");
            } else if (f.isNativeMethod()) {
                loc = "Native Method";
            } else if (file == null) {
                loc = "Unknown Source";
            } else {
                loc = file + (f.getLineNumber() >= 0 ? ":" + f.getLineNumber() : "");
            }
            tb.add("\tat " + where + "(" + loc + ")\n");
        }
    }

    static void sendInterrupted() {
        sendError("Interrupted", "the cell was interrupted (SIGINT)", List.of());
    }

    static void sendError(String ename, String evalue, List<String> tb) {
        String arr = tb.stream().map(s -> jstr(trunc(s))).collect(Collectors.joining(",", "[", "]"));
        send("error", "\"ename\":" + jstr(trunc(ename)) + ",\"evalue\":" + jstr(trunc(evalue)) + ",\"traceback\":" + arr, false);
    }

    static String trunc(String s) {
        return s.length() > MAX_PLAIN ? s.substring(0, MAX_PLAIN) + "\u2026[truncated]" : s;
    }

    // send writes one sync'ed message for the running request (dropped while
    // idle): the marker on fd 1 and 2 after all output before it, then the
    // message.
    static synchronized void send(String type, String fields, boolean end) {
        if (curId == null) return;
        System.out.flush();
        System.err.flush();
        sync++;
        byte[] marker = ("\u0000\u001eSBX-SYNC:" + nonce + ":" + sync + "\u001e\u0000").getBytes(StandardCharsets.UTF_8);
        for (OutputStream o : new OutputStream[] {OUT1, OUT2}) {
            try {
                o.write(marker);
            } catch (IOException e) {
                // The pipe is gone; order is best effort then.
            }
        }
        String body = "{\"type\":" + jstr(type) + ",\"id\":" + jstr(curId) + ",\"sync\":" + sync + (fields.isEmpty() ? "" : "," + fields) + "}\n";
        writeCtl(body);
        if (end) curId = null;
    }

    static void writeCtl(String s) {
        try {
            ctlOut.write(s.getBytes(StandardCharsets.UTF_8));
            ctlOut.flush();
        } catch (IOException e) {
            Runtime.getRuntime().halt(1); // the driver is gone
        }
    }

    static String jstr(String s) {
        StringBuilder b = new StringBuilder(s.length() + 2).append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"' -> b.append("\\\"");
                case '\\' -> b.append("\\\\");
                case '\n' -> b.append("\\n");
                case '\r' -> b.append("\\r");
                case '\t' -> b.append("\\t");
                default -> {
                    if (c < 0x20 || Character.isSurrogate(c) && !validSurrogate(s, i)) {
                        b.append(String.format("\\u%04x", c < 0x20 ? (int) c : 0xfffd));
                    } else {
                        b.append(c);
                    }
                }
            }
        }
        return b.append('"').toString();
    }

    static boolean validSurrogate(String s, int i) {
        char c = s.charAt(i);
        if (Character.isHighSurrogate(c)) return i + 1 < s.length() && Character.isLowSurrogate(s.charAt(i + 1));
        return i > 0 && Character.isHighSurrogate(s.charAt(i - 1));
    }

    // ------------------------------------------------------------ environment

    // writableEnv is the JVM's own map behind System.getenv(), which
    // ProcessBuilder copies too; null when the JVM does not let us at it.
    @SuppressWarnings("unchecked")
    static Map<String, String> writableEnv() {
        try {
            Map<String, String> env = System.getenv();
            Field f = env.getClass().getDeclaredField("m");
            f.setAccessible(true);
            return (Map<String, String>) f.get(env);
        } catch (ReflectiveOperationException | RuntimeException e) {
            return null;
        }
    }

    static Map<String, String> setEnv(Map<String, String> env) {
        Map<String, String> saved = new LinkedHashMap<>();
        if (env == null || envMap == null) return saved;
        for (var e : env.entrySet()) {
            saved.put(e.getKey(), envMap.get(e.getKey()));
            putEnv(e.getKey(), e.getValue());
        }
        return saved;
    }

    static void restoreEnv(Map<String, String> saved) {
        for (var e : saved.entrySet()) putEnv(e.getKey(), e.getValue());
    }

    // putEnv sets (value null: removes) a variable in both environments.
    static void putEnv(String k, String v) {
        if (v == null) envMap.remove(k);
        else envMap.put(k, v);
        NativeEnv.put(k, v);
    }

    // NativeEnv calls the C library's setenv and unsetenv, through the
    // foreign linker API of JDK 17 (an incubator module, reached by
    // reflection so the kernel compiles without it). Without it, processes
    // the snippets start get the kernel's start-up environment.
    static final class NativeEnv {
        static MethodHandle setenv, unsetenv;
        static Method toCString, address;
        static Object scope;

        static {
            try {
                Class<?> cl = Class.forName("jdk.incubator.foreign.CLinker");
                Class<?> ml = Class.forName("jdk.incubator.foreign.MemoryLayout");
                Class<?> fd = Class.forName("jdk.incubator.foreign.FunctionDescriptor");
                Class<?> sl = Class.forName("jdk.incubator.foreign.SymbolLookup");
                Class<?> ad = Class.forName("jdk.incubator.foreign.Addressable");
                Class<?> ma = Class.forName("jdk.incubator.foreign.MemoryAddress");
                Class<?> rs = Class.forName("jdk.incubator.foreign.ResourceScope");
                Class<?> ms = Class.forName("jdk.incubator.foreign.MemorySegment");
                Object linker = cl.getMethod("getInstance").invoke(null);
                Object lookup = cl.getMethod("systemLookup").invoke(null);
                Object cInt = cl.getField("C_INT").get(null);
                Object cPtr = cl.getField("C_POINTER").get(null);
                Method of = fd.getMethod("of", ml, ml.arrayType());
                Method down = cl.getMethod("downcallHandle", ad, MethodType.class, fd);
                Method find = sl.getMethod("lookup", String.class);
                Object[] args3 = (Object[]) Array.newInstance(ml, 3);
                args3[0] = cPtr;
                args3[1] = cPtr;
                args3[2] = cInt;
                Object[] args1 = (Object[]) Array.newInstance(ml, 1);
                args1[0] = cPtr;
                setenv = (MethodHandle) down.invoke(linker, ((Optional<?>) find.invoke(lookup, "setenv")).orElseThrow(),
                        MethodType.methodType(int.class, ma, ma, int.class), of.invoke(null, cInt, args3));
                unsetenv = (MethodHandle) down.invoke(linker, ((Optional<?>) find.invoke(lookup, "unsetenv")).orElseThrow(),
                        MethodType.methodType(int.class, ma), of.invoke(null, cInt, args1));
                scope = rs.getMethod("newImplicitScope").invoke(null);
                toCString = cl.getMethod("toCString", String.class, rs);
                address = ms.getMethod("address");
            } catch (ReflectiveOperationException | RuntimeException | LinkageError e) {
                setenv = null;
            }
        }

        static Object cstr(String s) throws ReflectiveOperationException {
            return address.invoke(toCString.invoke(null, s, scope));
        }

        static void put(String k, String v) {
            if (setenv == null) return;
            try {
                if (v == null) unsetenv.invokeWithArguments(cstr(k));
                else setenv.invokeWithArguments(cstr(k), cstr(v), 1);
            } catch (Throwable e) {
                // The JVM's map is set all the same.
            }
        }
    }

    // ------------------------------------------------------------------- JSON

    // Json reads the driver's requests: objects, strings and the scalars.
    static final class Json {
        final String s;
        int i;

        Json(String s) {
            if (s == null) throw new IllegalArgumentException("no input");
            this.s = s;
        }

        Object value() {
            Object v = any();
            ws();
            if (i != s.length()) throw new IllegalArgumentException("trailing text");
            return v;
        }

        void ws() {
            while (i < s.length() && " \t\r\n".indexOf(s.charAt(i)) >= 0) i++;
        }

        Object any() {
            ws();
            if (i >= s.length()) throw new IllegalArgumentException("truncated JSON");
            char c = s.charAt(i);
            if (c == '{') {
                i++;
                Map<String, Object> m = new LinkedHashMap<>();
                ws();
                if (peek('}')) return m;
                for (;;) {
                    ws();
                    if (!peek('"')) throw new IllegalArgumentException("want a key");
                    String k = str();
                    ws();
                    expect(':');
                    m.put(k, any());
                    ws();
                    if (peek('}')) return m;
                    expect(',');
                }
            }
            if (c == '[') {
                i++;
                List<Object> l = new ArrayList<>();
                ws();
                if (peek(']')) return l;
                for (;;) {
                    l.add(any());
                    ws();
                    if (peek(']')) return l;
                    expect(',');
                }
            }
            if (c == '"') {
                i++;
                return str();
            }
            int st = i;
            while (i < s.length() && ",}] \t\r\n".indexOf(s.charAt(i)) < 0) i++;
            String t = s.substring(st, i);
            return switch (t) {
                case "null" -> null;
                case "true" -> Boolean.TRUE;
                case "false" -> Boolean.FALSE;
                default -> {
                    try {
                        yield Double.parseDouble(t);
                    } catch (NumberFormatException e) {
                        throw new IllegalArgumentException("bad token " + t);
                    }
                }
            };
        }

        boolean peek(char c) {
            if (i < s.length() && s.charAt(i) == c) {
                i++;
                return true;
            }
            return false;
        }

        void expect(char c) {
            if (!peek(c)) throw new IllegalArgumentException("want '" + c + "' at " + i);
        }

        // str reads a string's rest, after its opening quote.
        String str() {
            StringBuilder b = new StringBuilder();
            for (;;) {
                if (i >= s.length()) throw new IllegalArgumentException("unterminated string");
                char c = s.charAt(i++);
                if (c == '"') return b.toString();
                if (c != '\\') {
                    b.append(c);
                    continue;
                }
                if (i >= s.length()) throw new IllegalArgumentException("unterminated string");
                char e = s.charAt(i++);
                switch (e) {
                    case 'n' -> b.append('\n');
                    case 't' -> b.append('\t');
                    case 'r' -> b.append('\r');
                    case 'b' -> b.append('\b');
                    case 'f' -> b.append('\f');
                    case 'u' -> {
                        if (i + 4 > s.length()) throw new IllegalArgumentException("bad \\u escape");
                        b.append((char) Integer.parseInt(s.substring(i, i + 4), 16));
                        i += 4;
                    }
                    default -> b.append(e);
                }
            }
        }
    }
}
