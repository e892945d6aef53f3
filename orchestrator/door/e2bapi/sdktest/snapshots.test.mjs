// Snapshots and forks through the official SDK, as E2B's users call them:
// createSnapshot, listSnapshots, Sandbox.create(snapshot name),
// deleteSnapshot, and sandbox.fork({count}). Each new sandbox must start
// with the source's globals and files; forks must be independent.
import { test, describe } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, T, withSandbox } from './helpers.mjs'

describe('snapshots', () => {
  test('createSnapshot, then Sandbox.create from its name has the globals and files; deleteSnapshot', T, async () => {
    await withSandbox(async (sbx) => {
      await sbx.runCode("x = 41\nopen('/workspace/notes.txt', 'w').write('kept')")
      const name = `sdk-snap-${Date.now()}`
      const snap = await sbx.createSnapshot({ name })
      assert.match(snap.snapshotId, /^snap-/)
      assert.deepEqual(snap.names, [name])
      // The source keeps running, untouched.
      assert.equal((await sbx.runCode('x + 1')).text, '42')

      const listed = await Sandbox.listSnapshots({ sandboxId: sbx.sandboxId }).nextItems()
      assert.deepEqual(listed.map((s) => s.snapshotId), [snap.snapshotId])

      const copy = await Sandbox.create(name)
      try {
        assert.equal((await copy.runCode("f'{x} ' + open('/workspace/notes.txt').read()")).text, '41 kept')
      } finally {
        await copy.kill().catch(() => {})
      }
      assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
      assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false, 'a deleted snapshot is not found')
      assert.deepEqual(await Sandbox.listSnapshots({ sandboxId: sbx.sandboxId }).nextItems(), [])
    })
  })

  test('fork({count: 2}): each fork has the state, and they are independent', T, async () => {
    await withSandbox(async (sbx) => {
      await sbx.runCode("branch = 'root'")
      const forks = await sbx.fork({ count: 2 })
      assert.equal(forks.length, 2)
      try {
        for (const f of forks) assert.ok(!(f instanceof Error), `a fork failed: ${f}`)
        await forks[0].runCode("branch = 'a'")
        assert.equal((await forks[1].runCode('branch')).text, 'root')
        assert.equal((await forks[0].runCode('branch')).text, 'a')
        assert.equal((await sbx.runCode('branch')).text, 'root')
        const ids = new Set((await Sandbox.list().nextItems()).map((s) => s.sandboxId))
        for (const f of forks) assert.ok(ids.has(f.sandboxId), 'a fork is listed')
      } finally {
        for (const f of forks) if (!(f instanceof Error)) await f.kill().catch(() => {})
      }
    })
  })
})
