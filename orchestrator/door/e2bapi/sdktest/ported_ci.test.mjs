// A port of a representative part of @e2b/code-interpreter's own JS tests
// (js/tests in e2b-dev/code-interpreter: basic, statefulness, callbacks,
// streaming, envVars, contexts, kernels, defaultKernels, displayData, data,
// executionCount, interrupt, reconnect, bash), rewritten for node:test with
// the same calls and expectations. One sandbox per test, as upstream's
// sandboxTest fixture does. Failures by design are listed, with why, in
// sdk_test.go's knownFailures.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, T, withSandbox } from './helpers.mjs'

const sandboxTest = (name, fn, opts) => test(name, T, () => withSandbox(fn, opts))

sandboxTest('basic', async (sbx) => {
  assert.equal((await sbx.runCode('x =1; x')).text, '1')
})

sandboxTest('statefulness', async (sbx) => {
  await sbx.runCode('test_stateful = 1')
  assert.equal((await sbx.runCode('test_stateful+=1; test_stateful')).text, '2')
})

sandboxTest('callback results', async (sbx) => {
  const results = []
  const r = await sbx.runCode('x =1; x', { onResult: (x) => results.push(x) })
  assert.equal(results.length, 1)
  assert.equal(r.results[0].text, '1')
})

sandboxTest('callback error', async (sbx) => {
  const errors = []
  const r = await sbx.runCode('xyz', { onError: (e) => errors.push(e) })
  assert.equal(errors.length, 1)
  assert.equal(r.error.name, 'NameError')
})

sandboxTest('callback stdout', async (sbx) => {
  const out = []
  const r = await sbx.runCode('print("hello")', { onStdout: (m) => out.push(m) })
  assert.equal(out.length, 1)
  assert.deepEqual(r.logs.stdout, ['hello\n'])
})

sandboxTest('callback stderr', async (sbx) => {
  const err = []
  const r = await sbx.runCode('import sys;print("This is an error message", file=sys.stderr)', { onStderr: (m) => err.push(m) })
  assert.equal(err.length, 1)
  assert.deepEqual(r.logs.stderr, ['This is an error message\n'])
})

sandboxTest('streaming output', async (sbx) => {
  const out = []
  await sbx.runCode('print(1)', { onStdout: (m) => out.push(m) })
  assert.equal(out.length, 1)
  assert.equal(out[0].line, '1\n')
})

sandboxTest('streaming result', async (sbx) => {
  const out = []
  await sbx.runCode('import matplotlib.pyplot as plt\nimport numpy as np\nx = np.linspace(0, 20, 100)\ny = np.sin(x)\nplt.plot(x, y)\nplt.show()\nx', { onResult: (r) => out.push(r) })
  assert.equal(out.length, 2)
})

test('env vars', T, async () => {
  await withSandbox(async (sbx) => {
    const r = await sbx.runCode(`import os; x = os.getenv('TEST_ENV_VAR'); x`)
    assert.equal(r.results[0].text.trim(), 'supertest')
  }, { envs: { TEST_ENV_VAR: 'supertest' } })
})

sandboxTest('env vars on sandbox', async (sbx) => {
  const r = await sbx.runCode("import os; os.getenv('FOO')", { envs: { FOO: 'bar' } })
  assert.equal(r.results[0].text.trim(), 'bar')
})

test('env vars on sandbox override', T, async () => {
  await withSandbox(async (sbx) => {
    await sbx.runCode("import os; os.environ['FOO'] = 'bar'; os.environ['RUNTIME_ENV'] = 'value'")
    assert.equal((await sbx.runCode("import os; os.getenv('FOO')", { envs: { FOO: 'baz' } })).results[0].text.trim(), 'baz')
    assert.equal((await sbx.runCode("import os; os.getenv('RUNTIME_ENV')")).results[0].text.trim(), 'value')
    assert.equal((await sbx.runCode("import os; os.getenv('SBX')")).results[0].text.trim(), 'value')
    assert.equal((await sbx.runCode("import os; os.getenv('FOO')")).results[0].text.trim(), 'bar')
  }, { envs: { FOO: 'bar', SBX: 'value' } })
})

sandboxTest('create context with no options', async (sbx) => {
  const ctx = await sbx.createCodeContext()
  const list = await sbx.listCodeContexts()
  const last = list[list.length - 1]
  assert.ok(last.id)
  assert.equal(last.language, ctx.language)
  assert.equal(last.cwd, ctx.cwd)
})

sandboxTest('create context with options', async (sbx) => {
  const ctx = await sbx.createCodeContext({ language: 'python', cwd: '/root' })
  const list = await sbx.listCodeContexts()
  const last = list[list.length - 1]
  assert.equal(last.language, ctx.language)
  assert.equal(last.cwd, ctx.cwd)
})

sandboxTest('remove context', async (sbx) => {
  const ctx = await sbx.createCodeContext()
  await sbx.removeCodeContext(ctx.id)
  assert.ok(!(await sbx.listCodeContexts()).map((c) => c.id).includes(ctx.id))
})

sandboxTest('list contexts', async (sbx) => {
  const langs = (await sbx.listCodeContexts()).map((c) => c.language)
  assert.ok(langs.includes('python'), `languages ${langs}`)
  assert.ok(langs.includes('javascript'), `languages ${langs}`)
})

sandboxTest('restart context', async (sbx) => {
  const ctx = await sbx.createCodeContext()
  await sbx.restartCodeContext(ctx.id)
})

sandboxTest('independence of kernels', async (sbx) => {
  await sbx.runCode('x = 1')
  const context = await sbx.createCodeContext()
  const out = await sbx.runCode('x', { context })
  assert.equal(out.error.value, "name 'x' is not defined")
})

sandboxTest('test js kernel', async (sbx) => {
  const out = await sbx.runCode('console.log("Hello World!")', { language: 'js' })
  assert.deepEqual(out.logs.stdout, ['Hello World!\n'])
})

sandboxTest('display data', async (sbx) => {
  const r = await sbx.runCode('import matplotlib.pyplot as plt\nimport numpy as np\nx = np.linspace(0, 20, 100)\ny = np.sin(x)\nplt.plot(x, y)\nplt.show()')
  assert.ok(r.results[0].png)
  assert.ok(r.results[0].text)
})

sandboxTest('get data', async (sbx) => {
  const r = await sbx.runCode('pd.DataFrame({"a": [1, 2, 3]})')
  assert.ok(r.results[0]?.data, `error: ${r.error?.name}: ${r.error?.value}`)
})

sandboxTest('execution count', async (sbx) => {
  await sbx.runCode('!pwd')
  const r = await sbx.runCode('!pwd')
  assert.equal(r.executionCount, 2)
})

sandboxTest('subsequent execution works after client timeout', async (sbx) => {
  await assert.rejects(sbx.runCode('import time; time.sleep(30)', { timeoutMs: 3_000 }))
  const r = await sbx.runCode('1 + 1', { timeoutMs: 10_000 })
  assert.equal(r.text, '2')
})

sandboxTest('reconnect', async (sbx) => {
  const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 60_000 })
  assert.equal((await again.runCode('x =1; x')).text, '1')
})

sandboxTest('bash', async (sbx) => {
  const r = await sbx.runCode('!pwd')
  assert.equal(r.logs.stdout.join().trim(), '/home/user')
})
