// Volumes through the official SDK, as E2B's users call them: the Volume
// class (create, connect, getInfo, list, destroy, and the files of a
// volume without a sandbox: writeFile, readFile, list, makeDir, getInfo,
// exists, remove), and Sandbox.create({volumeMounts}). The Go test sets
// E2B_VOLUME_API_URL to the door (the SDK's default for the volume content
// API is https://api.<domain>, not E2B_API_URL).
import { test, describe } from 'node:test'
import assert from 'node:assert/strict'
import { core, T, withSandbox } from './helpers.mjs'

const { Volume, VolumeError, VolumeNotFoundError, VolumePathNotFoundError, AuthenticationError } = core

let seq = 0
/** A fresh volume name of this run. */
const volName = (what) => `sdk-${what}-${Date.now()}-${seq++}`

/** Runs fn with a new volume, destroyed afterwards whatever happened. */
async function withVolume(what, fn, opts) {
  const vol = await Volume.create(volName(what), opts)
  try {
    return await fn(vol)
  } finally {
    await Volume.destroy(vol.volumeId, opts).catch(() => {})
  }
}

describe('volumes', () => {
  test('Volume: create, writeFile, readFile, getInfo, exists, list, makeDir, remove, destroy', T, async () => {
    const name = volName('files')
    const vol = await Volume.create(name)
    assert.match(vol.volumeId, /^vol-[a-z0-9]{20}$/)
    assert.equal(vol.name, name)
    assert.ok(vol.token, 'create returns the volume token')

    assert.equal((await vol.makeDir('/notes')).type, 'directory')
    const written = await vol.writeFile('/notes/hello.txt', 'hello volume')
    assert.equal(written.name, 'hello.txt')
    assert.equal(written.path, '/notes/hello.txt')
    assert.equal(written.type, 'file')
    assert.equal(written.size, 12)
    assert.ok(written.mtime instanceof Date && !isNaN(written.mtime))
    assert.equal(await vol.readFile('/notes/hello.txt'), 'hello volume')
    assert.deepEqual(await vol.readFile('notes/hello.txt', { format: 'bytes' }), new TextEncoder().encode('hello volume'))

    // force overwrites; without it an existing file is refused.
    await assert.rejects(vol.writeFile('/notes/hello.txt', 'other'), VolumeError)
    await vol.writeFile('/notes/hello.txt', 'hello again', { force: true })
    assert.equal(await vol.readFile('/notes/hello.txt'), 'hello again')

    const info = await vol.getInfo('/notes/hello.txt')
    assert.equal(info.type, 'file')
    assert.equal(info.size, 11)
    assert.equal((await vol.getInfo('/notes')).type, 'directory')
    assert.equal(await vol.exists('/notes/hello.txt'), true)
    assert.equal(await vol.exists('/notes/nope.txt'), false)
    await assert.rejects(vol.getInfo('/nope'), VolumePathNotFoundError)
    await assert.rejects(vol.readFile('/nope'), VolumePathNotFoundError)

    const dir = await vol.makeDir('/a/b/c', { force: true })
    assert.equal(dir.type, 'directory')
    assert.equal(dir.path, '/a/b/c')
    const top = (await vol.list('/')).map((e) => e.name)
    // (A backend's file system may have its own entries at the root, e.g. lost+found.)
    assert.ok(top.includes('a') && top.includes('notes') && !top.includes('b'), `depth 1 lists a and notes: ${top}`)
    const deep = await vol.list('/', { depth: 3 })
    assert.ok(deep.some((e) => e.path === '/a/b/c' && e.type === 'directory'), `depth 3 lists /a/b/c: ${deep.map((e) => e.path)}`)
    assert.ok(deep.some((e) => e.path === '/notes/hello.txt'))

    await vol.remove('/notes/hello.txt')
    assert.equal(await vol.exists('/notes/hello.txt'), false)
    await vol.remove('/a')
    assert.equal(await vol.exists('/a/b/c'), false, 'remove takes a directory whole')
    await assert.rejects(vol.remove('/a'), VolumePathNotFoundError)

    assert.equal(await Volume.destroy(vol.volumeId), true)
    assert.equal(await Volume.destroy(vol.volumeId), false, 'a destroyed volume is not found')
    await assert.rejects(Volume.getInfo(vol.volumeId), VolumeNotFoundError)
  })

  test('Volume.list, getInfo and connect by ID; another team sees nothing of it', T, async () => {
    await withVolume('list', async (vol) => {
      const listed = await Volume.list()
      assert.ok(listed.some((v) => v.volumeId === vol.volumeId && v.name === vol.name), 'the new volume is listed')

      const info = await Volume.getInfo(vol.volumeId)
      assert.equal(info.volumeId, vol.volumeId)
      assert.equal(info.name, vol.name)
      assert.equal(info.token, vol.token, 'the token is the same every time')

      await vol.writeFile('/kept.txt', 'kept')
      const again = await Volume.connect(vol.volumeId)
      assert.equal(again.name, vol.name)
      assert.equal(await again.readFile('/kept.txt'), 'kept')

      const other = { apiKey: process.env.E2B_API_KEY_OTHER }
      assert.ok(other.apiKey, 'E2B_API_KEY_OTHER is set by the Go test')
      assert.ok(!(await Volume.list(other)).some((v) => v.volumeId === vol.volumeId))
      await assert.rejects(Volume.getInfo(vol.volumeId, other), VolumeNotFoundError)
      assert.equal(await Volume.destroy(vol.volumeId, other), false)
      assert.equal(await vol.readFile('/kept.txt'), 'kept', 'the other team did not destroy it')

      // The other team's volume token does not open this volume.
      await withVolume('theirs', async (theirs) => {
        const forged = new Volume(vol.volumeId, vol.name, theirs.token)
        await assert.rejects(forged.readFile('/kept.txt'), AuthenticationError)
        await assert.rejects(new Volume(vol.volumeId, vol.name, 'wrong').list('/'), AuthenticationError)
      }, other)
    })
  })

  test('Volume: uid, gid and mode are set by updateMetadata, makeDir and writeFile', T, async () => {
    await withVolume('meta', async (vol) => {
      await vol.writeFile('/f.txt', 'x')
      const f = await vol.updateMetadata('/f.txt', { mode: 0o600 })
      assert.equal(f.mode & 0o777, 0o600)
      const d = await vol.makeDir('/d', { uid: 0, gid: 0 })
      assert.equal(d.uid, 0)
      assert.equal(d.gid, 0)
      const g = await vol.writeFile('/g.txt', 'x', { mode: 0o640 })
      assert.equal(g.mode & 0o777, 0o640)
      await assert.rejects(vol.updateMetadata('/f.txt', { mode: 0o4755 }), (err) => err instanceof VolumeError && /setuid/.test(err.message))
    })
  })

  test('Volume: writeFile and readFile stream 8 MiB', T, async () => {
    await withVolume('stream', async (vol) => {
      const size = 8 << 20
      const chunk = new Uint8Array(1 << 20).map((_, i) => i % 251)
      let sent = 0
      const body = new ReadableStream({
        pull(c) {
          if (sent >= size) return c.close()
          c.enqueue(chunk)
          sent += chunk.length
        },
      })
      const w = await vol.writeFile('/big.bin', body)
      assert.equal(w.size, size)
      const stream = await vol.readFile('/big.bin', { format: 'stream' })
      let got = 0
      let ok = true
      for await (const part of stream) {
        for (let i = 0; i < part.length; i += 4099) ok &&= part[i] === ((got + i) % (1 << 20)) % 251
        got += part.length
      }
      assert.equal(got, size)
      assert.ok(ok, 'the bytes read back are the bytes written')
    })
  })

  test('Sandbox.create({volumeMounts}): the sandbox reads and writes the volume; getInfo and list show the mount', T, async () => {
    await withVolume('mount', async (vol) => {
      await vol.writeFile('/from-api.txt', 'written without a sandbox')
      await withSandbox(async (sbx) => {
        const r = await sbx.commands.run('cat /mnt/data/from-api.txt && echo -n from-sandbox > /mnt/data/from-sbx.txt')
        assert.equal(r.stdout, 'written without a sandbox')
        assert.equal(await vol.readFile('/from-sbx.txt'), 'from-sandbox')
        assert.deepEqual((await sbx.runCode("print(open('/mnt/data/from-api.txt').read())")).logs.stdout, ['written without a sandbox\n'])

        const info = await sbx.getInfo()
        assert.deepEqual(info.volumeMounts, [{ name: vol.name, path: '/mnt/data' }])
        const listed = (await core.Sandbox.list().nextItems()).find((s) => s.sandboxId === sbx.sandboxId)
        assert.deepEqual(listed?.volumeMounts, [{ name: vol.name, path: '/mnt/data' }])

        // A mounted volume is not destroyed: E2B's destroy does not force.
        await assert.rejects(Volume.destroy(vol.volumeId), (err) => err instanceof VolumeError && new RegExp(sbx.sandboxId).test(err.message))
      }, { volumeMounts: { '/mnt/data': vol } })
      // By name, as a string, the files are still there.
      await withSandbox(async (sbx) => {
        const r = await sbx.commands.run('cat /data/v/from-sbx.txt')
        assert.equal(r.stdout, 'from-sandbox')
        assert.deepEqual((await sbx.getInfo()).volumeMounts, [{ name: vol.name, path: '/data/v' }])
      }, { volumeMounts: { '/data/v': vol.name } })
      assert.equal(await Volume.destroy(vol.volumeId), true, 'destroyed once its sandboxes are gone')
    })
  })

  test('Sandbox.create({volumeMounts}): a missing volume or a path outside /mnt and /data is refused', T, async () => {
    await assert.rejects(core.Sandbox.create({ volumeMounts: { '/mnt/x': volName('missing') } }), /not found/)
    await withVolume('badpath', async (vol) => {
      await assert.rejects(core.Sandbox.create({ volumeMounts: { '/workspace/x': vol } }), /\/mnt or \/data/)
    })
  })
})
