// sandboxd's own scenarios for the E2B door, written with the official SDKs:
// lifecycle, code interpreter, files, commands, isolation.
import { test, describe, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, core, T, withSandbox, waitFor, deferred, within, needs, kubeWithoutHibernation } from './helpers.mjs'

const { CommandExitError, NotFoundError, FileNotFoundError, AuthenticationError, FilesystemEventType, SandboxError } = core

describe('lifecycle', () => {
  test('create: a running sandbox with an ID, a new one each time', T, async () => {
    await withSandbox(async (a) => {
      await withSandbox(async (b) => {
        assert.match(a.sandboxId, /^sb-/)
        assert.notEqual(a.sandboxId, b.sandboxId)
        assert.equal(await a.isRunning(), true)
      })
    })
  })

  test('connect: the same sandbox, with its state', T, async () => {
    await withSandbox(async (sbx) => {
      await sbx.runCode('kept = 41')
      const again = await Sandbox.connect(sbx.sandboxId)
      assert.equal(again.sandboxId, sbx.sandboxId)
      const r = await again.runCode('kept + 1')
      assert.equal(r.text, '42')
    })
  })

  test('list: the metadata filter finds only matching sandboxes', T, async () => {
    const tag = `t${Date.now()}`
    await withSandbox(async (a) => {
      await withSandbox(async (b) => {
        const page = await Sandbox.list({ query: { metadata: { suite: tag, role: 'a' } } }).nextItems()
        assert.deepEqual(page.map((s) => s.sandboxId), [a.sandboxId])
        assert.deepEqual(page[0].metadata, { suite: tag, role: 'a' })
        assert.equal(page[0].state, 'running')
        const both = await Sandbox.list({ query: { metadata: { suite: tag } } }).nextItems()
        assert.deepEqual(both.map((s) => s.sandboxId).sort(), [a.sandboxId, b.sandboxId].sort())
      }, { metadata: { suite: tag, role: 'b' } })
    }, { metadata: { suite: tag, role: 'a' } })
  })

  test('list: pages of one with nextToken', T, async () => {
    const tag = `p${Date.now()}`
    await withSandbox(async (a) => {
      await withSandbox(async (b) => {
        const pager = Sandbox.list({ query: { metadata: { page: tag } }, limit: 1 })
        const first = await pager.nextItems()
        assert.equal(first.length, 1)
        assert.equal(pager.hasNext, true)
        const second = await pager.nextItems()
        assert.equal(second.length, 1)
        assert.notEqual(first[0].sandboxId, second[0].sandboxId)
        assert.equal(pager.hasNext, false)
      }, { metadata: { page: tag } })
    }, { metadata: { page: tag } })
  })

  test('getInfo: template, metadata, start and end', T, async () => {
    await withSandbox(async (sbx) => {
      const info = await sbx.getInfo()
      assert.equal(info.sandboxId, sbx.sandboxId)
      assert.equal(info.templateId, 'code-interpreter-v1')
      assert.deepEqual(info.metadata, { owner: 'alice' })
      assert.ok(info.endAt > info.startedAt)
      assert.ok(info.endAt.getTime() - Date.now() <= 600_000 + 5_000, `endAt ${info.endAt.toISOString()} is beyond the 10 min timeout`)
    }, { metadata: { owner: 'alice' }, timeoutMs: 600_000 })
  })

  test('setTimeout: moves the end time', T, async () => {
    await withSandbox(async (sbx) => {
      const before = (await sbx.getInfo()).endAt
      await sbx.setTimeout(3_600_000)
      const later = (await sbx.getInfo()).endAt
      assert.ok(later.getTime() > before.getTime() + 30 * 60_000, `endAt ${later.toISOString()} did not move an hour out from ${before.toISOString()}`)
    }, { timeoutMs: 300_000 })
  })

  test('kill: the sandbox is gone; killing it again answers false', T, async () => {
    const sbx = await Sandbox.create()
    await sbx.kill()
    assert.equal(await sbx.isRunning(), false)
    assert.equal(await Sandbox.kill(sbx.sandboxId), false)
    await assert.rejects(Sandbox.getInfo(sbx.sandboxId), NotFoundError)
    await assert.rejects(Sandbox.connect(sbx.sandboxId), NotFoundError)
  })

  test('getMetrics: a busy loop shows, within the limits sandboxd set; it calms once killed', needs('per-sandbox metrics'), async () => {
    await withSandbox(async (sbx) => {
      const busy = await sbx.commands.run('exec python3 -c "while True: pass"', { background: true })
      let last
      const latest = async () => { last = (await sbx.getMetrics()).at(-1); return last }
      const shown = () => `a sample with it; last ${JSON.stringify(last)}`
      await waitFor(async () => (await latest())?.cpuUsedPct > 50, shown, 60_000)
      assert.equal(last.cpuCount, 1)
      assert.equal(last.memTotal, 512 * 1024 * 1024)
      assert.ok(last.memUsed > 0 && last.memUsed < last.memTotal, `memUsed ${last.memUsed}`)
      assert.ok(last.diskTotal >= last.diskUsed, `disk ${last.diskUsed} of ${last.diskTotal}`)
      assert.ok(last.timestamp instanceof Date && Math.abs(Date.now() - last.timestamp.getTime()) < 60_000, `timestamp ${last.timestamp}`)
      await busy.kill()
      await waitFor(async () => (await latest())?.cpuUsedPct < 20, shown, 60_000)
      assert.deepEqual(await sbx.getMetrics({ start: new Date(Date.now() + 3_600_000) }), [], 'no sample after start')
      assert.ok((await sbx.getMetrics({ end: new Date(0) })).length === 0, 'no sample before end')
    })
  })

  test('pause, then connect: the sandbox hibernates and wakes with its globals and files', needs('hibernation'), async () => {
    const tag = `z${Date.now()}`
    await withSandbox(async (sbx) => {
      await sbx.runCode('kept = [1, 2, 3]')
      await sbx.files.write('note.txt', 'hello')
      assert.equal(await sbx.pause(), true)
      assert.equal(await sbx.isRunning(), false)
      assert.equal(await Sandbox.pause(sbx.sandboxId), false, 'pausing a paused sandbox answers false')
      assert.equal((await sbx.getInfo()).state, 'paused')
      const paused = await Sandbox.list({ query: { metadata: { pz: tag }, state: ['paused'] } }).nextItems()
      assert.deepEqual(paused.map((s) => [s.sandboxId, s.state]), [[sbx.sandboxId, 'paused']])
      const running = await Sandbox.list({ query: { metadata: { pz: tag }, state: ['running'] } }).nextItems()
      assert.deepEqual(running, [])
      const again = await Sandbox.connect(sbx.sandboxId)
      assert.equal(await again.isRunning(), true)
      assert.equal((await again.getInfo()).state, 'running')
      assert.equal((await again.runCode('sum(kept)')).text, '6')
      assert.equal(await again.files.read('note.txt'), 'hello')
    }, { metadata: { pz: tag } })
  })

  test("create with lifecycle onTimeout 'pause' is accepted", needs('hibernation'), async () => {
    await withSandbox(async (sbx) => {
      assert.equal((await sbx.getInfo()).state, 'running')
      assert.equal((await sbx.runCode('1 + 1')).text, '2')
    }, { lifecycle: { onTimeout: 'pause' } })
  })

  test('kubernetes without a storage class: pause and autoPause fail with an error naming the feature and the backend', kubeWithoutHibernation ? T : { skip: 'only on --backend kubernetes without --kube-storage-class' }, async () => {
    const named = (feature) => (e) => e instanceof SandboxError && e.message.includes(feature) && e.message.includes('kubernetes backend')
    await withSandbox(async (sbx) => {
      // 501, not E2B's 409, which pause would read as "already paused" and answer false.
      await assert.rejects(sbx.pause(), named('hibernation'))
      assert.equal(await sbx.isRunning(), true)
      assert.equal((await sbx.runCode('1 + 1')).text, '2')
    })
    await assert.rejects(Sandbox.create({ lifecycle: { onTimeout: 'pause' } }), named('hibernation'))
  })

  test('a wrong API key is refused', T, async () => {
    await assert.rejects(Sandbox.create({ apiKey: 'e2b_' + '0'.repeat(40) }), AuthenticationError)
  })

  test('another tenant neither lists nor reaches the sandbox', T, async () => {
    const other = process.env.E2B_API_KEY_OTHER
    assert.ok(other, 'E2B_API_KEY_OTHER is set by the Go test')
    await withSandbox(async (sbx) => {
      const theirs = await Sandbox.list({ apiKey: other }).nextItems()
      assert.ok(!theirs.some((s) => s.sandboxId === sbx.sandboxId), 'listed to another tenant')
      await assert.rejects(Sandbox.connect(sbx.sandboxId, { apiKey: other }), NotFoundError)
      assert.equal(await Sandbox.kill(sbx.sandboxId, { apiKey: other }), false)
      assert.equal(await sbx.isRunning(), true)
    })
  })
})

describe('code interpreter', () => {
  let sbx
  before(async () => { sbx = await Sandbox.create() })
  after(async () => { await sbx?.kill() })

  test('runCode keeps state between calls', T, async () => {
    await sbx.runCode('counter = 10')
    await sbx.runCode('counter += 5')
    assert.equal((await sbx.runCode('counter')).text, '15')
  })

  test('an expression is the main result; a str shows without quotes', T, async () => {
    const r = await sbx.runCode('x = 20\nx * 2 + 2')
    assert.equal(r.text, '42')
    assert.equal(r.results.length, 1)
    assert.equal(r.results[0].isMainResult, true)
    assert.equal((await sbx.runCode('"hello"')).text, 'hello')
  })

  test('stdout and stderr reach their callbacks and the logs', T, async () => {
    const out = []
    const err = []
    const r = await sbx.runCode('import sys\nprint("to out")\nprint("to err", file=sys.stderr)', {
      onStdout: (m) => out.push(m.line),
      onStderr: (m) => err.push(m.line),
    })
    assert.equal(out.join(''), 'to out\n')
    assert.equal(err.join(''), 'to err\n')
    assert.deepEqual(r.logs.stdout, ['to out\n'])
    assert.deepEqual(r.logs.stderr, ['to err\n'])
  })

  test('an exception is execution.error, with its traceback', T, async () => {
    const errors = []
    const r = await sbx.runCode('def f():\n    raise ValueError("bad value")\nf()', { onError: (e) => errors.push(e) })
    assert.equal(r.error.name, 'ValueError')
    assert.equal(r.error.value, 'bad value')
    assert.match(r.error.traceback, /f\(\)/)
    assert.equal(errors.length, 1)
  })

  test('a matplotlib figure is a PNG result', T, async () => {
    const r = await sbx.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()')
    const png = r.results.find((x) => x.png)
    assert.ok(png, `no PNG among ${JSON.stringify(r.results.map((x) => x.formats()))}`)
    assert.equal(Buffer.from(png.png, 'base64').subarray(1, 4).toString(), 'PNG')
  })

  test("PIL's Image.show() is a PNG result, as on E2B", T, async () => {
    const r = await sbx.runCode("from PIL import Image\nImage.new('RGB', (40, 30), 'red').show()\nprint('shown')")
    const png = r.results.filter((x) => x.png)
    assert.equal(png.length, 1, `want one PNG among ${JSON.stringify(r.results.map((x) => x.formats()))}`)
    assert.equal(Buffer.from(png[0].png, 'base64').subarray(1, 4).toString(), 'PNG')
    assert.equal(png[0].isMainResult, false, 'a display, not the cell\'s value')
    assert.deepEqual(r.logs.stdout, ['shown\n'])
  })

  test('a DataFrame is HTML and data', T, async () => {
    const r = await sbx.runCode('import pandas as pd\npd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]})')
    assert.equal(r.results.length, 1)
    assert.match(r.results[0].html, /<table/)
    assert.ok(r.results[0].data, `no data in ${r.results[0].formats()}`)
  })

  test('display() and a result: two results, only the last main', T, async () => {
    const seen = []
    const r = await sbx.runCode('from IPython.display import display, HTML\ndisplay(HTML("<b>shown</b>"))\n1 + 1', { onResult: (x) => seen.push(x) })
    assert.equal(r.results.length, 2)
    assert.equal(r.results[0].isMainResult, false)
    assert.match(r.results[0].html, /<b>shown<\/b>/)
    assert.equal(r.results[1].isMainResult, true)
    assert.equal(r.text, '2')
    assert.equal(seen.length, 2)
  })

  test('env vars apply to that run only', T, async () => {
    const r = await sbx.runCode('import os\nos.environ.get("GREETING")', { envs: { GREETING: 'hi there' } })
    assert.equal(r.text, 'hi there')
    assert.equal((await sbx.runCode('import os\nos.environ.get("GREETING", "unset")')).text, 'unset')
  })

  test('bash runs as a language', T, async () => {
    const r = await sbx.runCode('echo "from $0" | tr a-z A-Z', { language: 'bash' })
    assert.match(r.logs.stdout.join(''), /FROM /)
  })

  test('JavaScript keeps its own globals', T, async () => {
    await sbx.runCode('globalThis.jsv = 6', { language: 'js' })
    const r = await sbx.runCode('jsv * 7', { language: 'javascript' })
    assert.equal(r.text, '42')
  })

  test('Java keeps its definitions; errors carry the exception', T, async () => {
    await sbx.runCode('int jv = 6;\nint times(int a) { return a * jv; }', { language: 'java' })
    const r = await sbx.runCode('System.out.println("java");\ntimes(7)', { language: 'java' })
    assert.equal(r.text, '42')
    assert.deepEqual(r.logs.stdout, ['java\n'])
    const e = await sbx.runCode('times(7) / 0', { language: 'java' })
    assert.equal(e.error?.name, 'java.lang.ArithmeticException')
    assert.equal(e.error?.value, '/ by zero')
  })

  test('execution count goes up', T, async () => {
    const a = await sbx.runCode('1')
    const b = await sbx.runCode('2')
    assert.equal(typeof a.executionCount, 'number')
    assert.equal(b.executionCount, a.executionCount + 1)
  })

  test('contexts: own globals, listed, restarted, removed', T, async () => {
    await sbx.runCode('where = "default"')
    const ctx = await sbx.createCodeContext({ language: 'python' })
    assert.equal(ctx.language, 'python')
    await sbx.runCode('where = "ctx"', { context: ctx })
    assert.equal((await sbx.runCode('where', { context: ctx })).text, 'ctx')
    assert.equal((await sbx.runCode('where')).text, 'default')
    assert.ok((await sbx.listCodeContexts()).some((c) => c.id === ctx.id))
    await sbx.restartCodeContext(ctx)
    const r = await sbx.runCode('where', { context: ctx })
    assert.equal(r.error?.name, 'NameError')
    await sbx.removeCodeContext(ctx)
    assert.ok(!(await sbx.listCodeContexts()).some((c) => c.id === ctx.id))
  })

  test('a client timeout interrupts the code; the kernel goes on', T, async () => {
    await sbx.runCode('survivor = "kept"')
    await assert.rejects(sbx.runCode('import time\nwhile True: time.sleep(0.1)', { timeoutMs: 2_000 }), /timed out|Timeout/i)
    // The interrupted loop must not hold the kernel: the next run is
    // served, with the globals kept.
    const r = await sbx.runCode('survivor', { timeoutMs: 30_000 })
    assert.equal(r.text, 'kept')
  })

  test('code that ignores the interrupt is killed once its client left; the next run says its state was lost', T, async () => {
    await sbx.runCode('lost_global = "before"')
    await assert.rejects(sbx.runCode('import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: time.sleep(0.1)', { timeoutMs: 2_000 }), /timed out|Timeout/i)
    // sandboxd interrupts it, then kills the interpreter after its grace:
    // the globals are gone, and the next run, on a fresh interpreter, says
    // so on stderr before its output.
    const r = await sbx.runCode('print(globals().get("lost_global"))', { timeoutMs: 60_000 })
    assert.deepEqual(r.logs.stdout, ['None\n'])
    assert.match(r.logs.stderr.join(''), /state_lost: .*Python globals are gone/)
    assert.equal(r.error, undefined)
    // Told once.
    const again = await sbx.runCode('1')
    assert.deepEqual(again.logs.stderr, [])
  })
})

describe('files', () => {
  let sbx
  before(async () => { sbx = await Sandbox.create() })
  after(async () => { await sbx?.kill() })

  test('write and read text', T, async () => {
    const info = await sbx.files.write('notes/hello.txt', 'hello, world\n')
    assert.equal(info.name, 'hello.txt')
    assert.equal(await sbx.files.read('notes/hello.txt'), 'hello, world\n')
    assert.equal(await sbx.files.read('/home/user/notes/hello.txt'), 'hello, world\n')
  })

  test('write and read bytes', T, async () => {
    const data = new Uint8Array(256).map((_, i) => i)
    await sbx.files.write('bin/all.bytes', data.buffer)
    const back = await sbx.files.read('bin/all.bytes', { format: 'bytes' })
    assert.deepEqual(Buffer.from(back), Buffer.from(data))
  })

  test('octet-stream and gzip uploads', T, async () => {
    await sbx.files.write('raw/octet.txt', 'sent raw', { useOctetStream: true })
    assert.equal(await sbx.files.read('raw/octet.txt'), 'sent raw')
    const big = 'z'.repeat(100_000)
    await sbx.files.write('raw/gzipped.txt', big, { gzip: true })
    assert.equal(await sbx.files.read('raw/gzipped.txt'), big)
  })

  test('writeFiles writes several files at once', T, async () => {
    await sbx.files.write([{ path: 'multi/a.txt', data: 'A' }, { path: 'multi/b.txt', data: 'B' }])
    assert.equal(await sbx.files.read('multi/a.txt'), 'A')
    assert.equal(await sbx.files.read('multi/b.txt'), 'B')
  })

  test('list a directory', T, async () => {
    await sbx.files.write('listme/one.txt', '1')
    await sbx.files.makeDir('listme/sub')
    const entries = await sbx.files.list('listme')
    assert.deepEqual(entries.map((e) => [e.name, e.type]).sort(), [['one.txt', 'file'], ['sub', 'dir']])
    assert.equal(entries.find((e) => e.name === 'one.txt').path, '/workspace/listme/one.txt')
  })

  test('makeDir: true when made, false when it exists', T, async () => {
    assert.equal(await sbx.files.makeDir('made/deep/er'), true)
    assert.equal(await sbx.files.makeDir('made/deep/er'), false)
    assert.equal((await sbx.files.getInfo('made/deep')).type, 'dir')
  })

  test('rename moves a file', T, async () => {
    await sbx.files.write('mv-from.txt', 'moving')
    const info = await sbx.files.rename('mv-from.txt', 'mv-to.txt')
    assert.equal(info.name, 'mv-to.txt')
    assert.equal(await sbx.files.exists('mv-from.txt'), false)
    assert.equal(await sbx.files.read('mv-to.txt'), 'moving')
  })

  test('remove a file and a directory', T, async () => {
    await sbx.files.write('gone/file.txt', 'x')
    await sbx.files.remove('gone/file.txt')
    assert.equal(await sbx.files.exists('gone/file.txt'), false)
    await sbx.files.write('gone/again.txt', 'x')
    await sbx.files.remove('gone')
    assert.equal(await sbx.files.exists('gone'), false)
  })

  test('getInfo of a file and reading a missing one', T, async () => {
    await sbx.files.write('sized.txt', '12345')
    const info = await sbx.files.getInfo('sized.txt')
    assert.equal(info.type, 'file')
    assert.equal(info.size, 5)
    await assert.rejects(sbx.files.read('no/such/file.txt'), FileNotFoundError)
  })

  test('files written by code are readable, and the other way round', T, async () => {
    await sbx.files.write('shared.txt', 'from the SDK')
    const r = await sbx.runCode('open("/workspace/shared.txt").read()')
    assert.equal(r.text, 'from the SDK')
    await sbx.commands.run('echo -n from-bash > /workspace/bashed.txt')
    assert.equal(await sbx.files.read('bashed.txt'), 'from-bash')
  })

  test('watchDir sees a file created', T, async () => {
    await sbx.files.makeDir('watched')
    const got = deferred()
    const handle = await sbx.files.watchDir('watched', (ev) => {
      if (ev.name === 'new.txt' && ev.type === FilesystemEventType.CREATE) got.resolve(ev)
    })
    try {
      await sbx.files.write('watched/new.txt', 'hi')
      await within(got.p, 20_000, 'a create event for watched/new.txt')
    } finally {
      await handle.stop()
    }
  })
})

describe('commands', () => {
  let sbx
  before(async () => { sbx = await Sandbox.create() })
  after(async () => { await sbx?.kill() })

  test('run: stdout and exit code 0', T, async () => {
    const r = await sbx.commands.run('echo hello; echo oops >&2')
    assert.equal(r.exitCode, 0)
    assert.equal(r.stdout, 'hello\n')
    assert.equal(r.stderr, 'oops\n')
  })

  test('a non-zero exit is CommandExitError', T, async () => {
    await assert.rejects(sbx.commands.run('echo partial; exit 3'), (e) => {
      assert.ok(e instanceof CommandExitError)
      assert.equal(e.exitCode, 3)
      assert.equal(e.stdout, 'partial\n')
      return true
    })
  })

  test('output streams to the callbacks as it comes', T, async () => {
    const lines = []
    const r = await sbx.commands.run('for i in 1 2 3; do echo line$i; sleep 0.2; done', { onStdout: (d) => lines.push(d) })
    assert.equal(lines.join(''), 'line1\nline2\nline3\n')
    assert.ok(lines.length >= 2, `output came in ${lines.length} piece(s), not as it was written`)
    assert.equal(r.stdout, 'line1\nline2\nline3\n')
  })

  test('envs and cwd', T, async () => {
    await sbx.files.makeDir('cwdtest')
    const r = await sbx.commands.run('echo "$MYVAR in $(pwd)"', { envs: { MYVAR: 'value' }, cwd: '/home/user/cwdtest' })
    assert.equal(r.stdout, 'value in /workspace/cwdtest\n')
  })

  test('background command: listed, then connected to by pid', T, async () => {
    const h = await sbx.commands.run('echo started; sleep 2; echo finished', { background: true })
    assert.ok(h.pid > 0)
    const listed = await sbx.commands.list()
    assert.ok(listed.some((p) => p.pid === h.pid), `pid ${h.pid} not in ${JSON.stringify(listed)}`)
    await h.disconnect()
    const again = await sbx.commands.connect(h.pid)
    const r = await again.wait()
    assert.equal(r.exitCode, 0)
    assert.match(r.stdout, /finished\n$/)
  })

  test('kill ends a running command', T, async () => {
    const h = await sbx.commands.run('sleep 60', { background: true })
    assert.equal(await h.kill(), true)
    await assert.rejects(h.wait(), CommandExitError)
    assert.equal(await sbx.commands.kill(h.pid), false)
  })

  test('stdin: sendStdin then closeStdin', T, async () => {
    const h = await sbx.commands.run('cat', { background: true, stdin: true })
    await sbx.commands.sendStdin(h.pid, 'piped text\n')
    await waitFor(() => h.stdout === 'piped text\n', 'cat to echo its input')
    await sbx.commands.closeStdin(h.pid)
    const r = await h.wait()
    assert.equal(r.exitCode, 0)
    assert.equal(r.stdout, 'piped text\n')
  })

  test('a running command holds up neither other commands nor runCode', T, async () => {
    // Were they queued behind it, these would wait the full 600 s and the
    // test would time out.
    const h = await sbx.commands.run('sleep 600', { background: true })
    try {
      assert.equal((await sbx.commands.run('echo beside')).stdout, 'beside\n')
      assert.equal((await sbx.runCode('6 * 7')).text, '42')
    } finally {
      await h.kill()
    }
  })

  test('pty: an interactive shell that answers and resizes', T, async () => {
    let out = ''
    const dec = new TextDecoder()
    const h = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { out += dec.decode(d) } })
    try {
      await sbx.pty.sendInput(h.pid, new TextEncoder().encode('echo pty-$((6*7)); tty\n'))
      await waitFor(() => out.includes('pty-42') && out.includes('/dev/pts/'), () => `the shell to answer (got ${JSON.stringify(out)})`)
      await sbx.pty.resize(h.pid, { cols: 100, rows: 30 })
      await sbx.pty.sendInput(h.pid, new TextEncoder().encode('stty size\n'))
      await waitFor(() => out.includes('30 100'), () => `the new size (got ${JSON.stringify(out)})`)
    } finally {
      await sbx.pty.kill(h.pid)
    }
  })

  test('a command timeout ends the wait with an error', T, async () => {
    await assert.rejects(sbx.commands.run('sleep 30', { timeoutMs: 1_500 }))
  })
})

describe('isolation', () => {
  test('two sandboxes share neither files nor variables', T, async () => {
    await withSandbox(async (a) => {
      await withSandbox(async (b) => {
        await a.files.write('secret.txt', 'only in a')
        await a.runCode('secret = 1')
        assert.equal(await b.files.exists('secret.txt'), false)
        assert.equal((await b.runCode('secret')).error?.name, 'NameError')
        const other = await b.commands.run('ls /workspace')
        assert.doesNotMatch(other.stdout, /secret/)
      })
    })
  })

  test("one sandbox's access token does not open another", T, async () => {
    await withSandbox(async (a) => {
      await withSandbox(async (b) => {
        const res = await fetch(`${process.env.E2B_SANDBOX_URL}/health`, {
          headers: { 'E2b-Sandbox-Id': b.sandboxId, 'E2b-Sandbox-Port': '49983', 'X-Access-Token': a.envdAccessToken },
        })
        assert.equal(res.status, 401)
      })
    })
  })
})
