// Templates through the official SDK, as E2B's users build them: the
// Template builder (fromBaseImage, aptInstall, copy, setEnvs, runCmd),
// Template.build with onBuildLogs (request, file upload, build start,
// status polls), Template.exists and getTags, and Sandbox.create(name)
// from the template built. The tests named "Template…" need no sandbox:
// the Go test TestSDKTemplatesOverFake runs them over the door and a
// scripted fake; TestSDK runs the whole file against a real sandboxd.
import { test, describe, after } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { core, T } from './helpers.mjs'

const { Template, BuildError, Sandbox } = core

/**
 * Whether the server's backend builds templates: one without them (the
 * Kubernetes backend; the Docker backend before its templates) answers
 * 501 "… are not supported by sandboxd's … backend"; the scenarios that
 * need builds are then skipped, saying so.
 */
async function backendLacksTemplates() {
  const res = await fetch(`${process.env.E2B_API_URL}/templates/sdk-probe/files/${'0'.repeat(64)}`, {
    headers: { 'X-API-KEY': process.env.E2B_API_KEY },
  })
  const body = await res.json().catch(() => ({}))
  return res.status === 501 && /are not supported by sandboxd's \S+ backend/.test(body.message ?? '') ? body.message : false
}
const lacking = await backendLacksTemplates()

/** Builds can take minutes on a real server (apt, the image's layers). */
// Under CI a backend without templates fails these rather than skipping.
const TB = { timeout: 600_000, skip: process.env.CI === 'true' ? false : lacking }

let seq = 0
/** A fresh template name of this run. */
const tplName = (what) => `sdk-${what}-${Date.now()}-${seq++}`

/** The build context: file.txt, which the template copies. */
const context = fs.mkdtempSync(path.join(os.tmpdir(), 'sdk-template-'))
fs.writeFileSync(path.join(context, 'file.txt'), 'copied\n')

const made = []
after(async () => {
  // Template has no delete in the SDK; E2B's CLI calls DELETE /templates/{id}.
  for (const name of made) {
    await fetch(`${process.env.E2B_API_URL}/templates/${name}`, {
      method: 'DELETE', headers: { 'X-API-KEY': process.env.E2B_API_KEY },
    }).catch(() => {})
  }
  fs.rmSync(context, { recursive: true, force: true })
})

/** The template the sandbox test uses, built once (by the first test). */
let built
function buildMain() {
  if (!built) {
    const name = tplName('main')
    made.push(name)
    const logs = []
    const template = Template({ fileContextPath: context })
      .fromBaseImage()
      .aptInstall(['jq'])
      .copy('file.txt', '/opt/t/')
      .setEnvs({ A: '1' })
      .runCmd('echo hi > /opt/t/hi')
    built = Template.build(template, name, { onBuildLogs: (e) => logs.push(e) }).then((info) => ({ name, info, logs }))
  }
  return built
}

describe('templates', () => {
  test('Template.build: from the base image, apt, copy, env and run, with its logs', TB, async () => {
    const { name, info, logs } = await buildMain()
    assert.equal(info.name, name)
    assert.ok(info.templateId, 'a template ID')
    assert.match(info.buildId, /^[0-9a-f-]{36}$/)
    const messages = logs.map((e) => e.message)
    assert.ok(messages.some((m) => m.includes("Uploaded 'file.txt'")), `the archive was uploaded: ${messages.join(' | ')}`)
    // The server's own lines arrive between the SDK's "Waiting for logs..." and "Build finished".
    const from = messages.indexOf('Waiting for logs...')
    assert.ok(from >= 0 && messages.length - from > 2, `server log lines: ${messages.join(' | ')}`)
    assert.equal(await Template.exists(name), true)
    const tags = await Template.getTags(name)
    assert.equal(tags.length, 1)
    assert.equal(tags[0].tag, 'default')
    // Built again unchanged: the archive is present, the upload skipped.
    const again = []
    const template = Template({ fileContextPath: context }).fromBaseImage().copy('file.txt', '/opt/t/').runCmd('true')
    const name2 = tplName('again')
    made.push(name2)
    await Template.build(template, name2, { onBuildLogs: (e) => again.push(e.message) })
    assert.ok(again.some((m) => m.includes("Skipping upload of 'file.txt'")), `cached: ${again.join(' | ')}`)
  })

  test('Template.build: a failing runCmd is a BuildError with the server\'s reason', TB, async () => {
    const name = tplName('fails')
    made.push(name)
    const template = Template({ fileContextPath: context }).fromBaseImage().runCmd('echo about to fail && exit 3')
    await assert.rejects(Template.build(template, name), (err) => {
      assert.ok(err instanceof BuildError, `${err?.constructor?.name}: ${err}`)
      // The build's own failure (its reason), not a refused request ("409: …").
      assert.ok(err.message.length > 0 && !/^\d{3}: /.test(err.message), err.message)
      return true
    })
  })

  test('Template.build: fromImage(python:3) is refused, the server has no registry', T, async () => {
    const name = tplName('python')
    const template = Template({ fileContextPath: context }).fromPythonImage('3').runCmd('true')
    await assert.rejects(Template.build(template, name), (err) => {
      assert.ok(err instanceof BuildError, `${err?.constructor?.name}: ${err}`)
      assert.match(err.message, /^400: .*python:3.*offline/)
      return true
    })
    const withStart = Template({ fileContextPath: context }).fromBaseImage().runCmd('true').setStartCmd('sleep infinity', 'true')
    await assert.rejects(Template.build(withStart, name), /startCmd/)
  })

  test('Template: another team sees nothing of a template', TB, async () => {
    const { name } = await buildMain()
    const other = { apiKey: process.env.E2B_API_KEY_OTHER }
    assert.equal(await Template.exists(name, other), false)
    await assert.rejects(Template.getTags(name, other), /404/)
    await assert.rejects(Sandbox.create(name, other), /not served here/)
    assert.equal(await Template.exists(`${name}-never-built`), false)
  })

  test('Sandbox.create(template): its packages, files and environment', TB, async () => {
    const { name } = await buildMain()
    const sbx = await Sandbox.create(name)
    try {
      const info = await sbx.getInfo()
      assert.ok(info.templateId, 'getInfo names the template')
      const jq = await sbx.commands.run('jq --version')
      assert.match(jq.stdout, /^jq-/)
      assert.equal((await sbx.commands.run('cat /opt/t/hi')).stdout, 'hi\n')
      assert.equal((await sbx.commands.run('cat /opt/t/file.txt')).stdout, 'copied\n')
      assert.equal((await sbx.commands.run('echo $A')).stdout, '1\n')
    } finally {
      await sbx.kill().catch(() => {})
    }
  })
})
