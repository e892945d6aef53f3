// Driven by TestSDKAcrossRestart (sdk_test.go) in two steps around a
// sandboxd restart: "before" starts work in a sandbox and prints what the
// second step needs as JSON; "after" (argv[3] is that JSON) reattaches with
// the SDK and checks nothing was lost or run twice.
import assert from 'node:assert/strict'
import { Sandbox } from './helpers.mjs'

const step = process.argv[2]
if (step === 'before') {
  const sbx = await Sandbox.create({ timeoutMs: 600_000 })
  await sbx.runCode('before_restart = 7')
  // Each line is appended to a file too: a second run would show twice.
  const h = await sbx.commands.run('for i in $(seq 1 10); do echo line$i; echo line$i >> /workspace/ran.txt; sleep 1; done', { background: true })
  await h.disconnect()
  console.log(JSON.stringify({ id: sbx.sandboxId, pid: h.pid }))
} else if (step === 'after') {
  const { id, pid } = JSON.parse(process.argv[3])
  const sbx = await Sandbox.connect(id)
  const h = await sbx.commands.connect(pid)
  const r = await h.wait()
  const want = Array.from({ length: 10 }, (_, i) => `line${i + 1}\n`).join('')
  assert.equal(r.stdout, want, 'the command output, every line once')
  assert.equal(await sbx.files.read('ran.txt'), want, 'the command ran once')
  assert.equal((await sbx.runCode('before_restart * 6')).text, '42', 'the interpreter state')
  await sbx.kill()
  console.log('ok')
} else {
  throw new Error(`unknown step ${step}`)
}
