// The E2B door's network options through the official SDK: what create
// and updateNetwork send and what getInfo returns. Enforcement (the egress
// gateway) is tested elsewhere; here the API's answers are asserted, and
// that no header value a rule carries ever comes back. The Go side starts
// sandboxd with --allow-network unless its runtime cannot have it (then
// SANDBOXD_NETWORK is empty and these tests are skipped).
import { test, describe } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, core, T, withSandbox } from './helpers.mjs'

const { SandboxError } = core
const networked = process.env.SANDBOXD_NETWORK === '1'
const N = { ...T, skip: networked ? false : 'sandboxd runs without --allow-network here' }

const SECRET = 'Bearer sk-sdk-network-secret-0123456789'

describe('network', () => {
  test('create with network: getInfo returns the policy, header names without values', N, async () => {
    await withSandbox(async (sbx) => {
      const info = await sbx.getInfo()
      assert.equal(info.allowInternetAccess, true)
      // allowOut as given (matched without regard to case); rule keys in
      // lower case, as E2B stores them.
      assert.deepEqual(info.network.allowOut, ['API.example.com', 'pypi.org'])
      assert.deepEqual(info.network.denyOut, ['0.0.0.0/0'])
      assert.deepEqual(info.network.rules, { 'api.example.com': [{ transform: { headers: { Authorization: '' } } }] })
      assert.equal(info.network.allowPublicTraffic, false)
      assert.ok(!JSON.stringify(info).includes('sk-sdk'), 'getInfo shows the secret')
      const listed = await Sandbox.list().nextItems()
      assert.ok(!JSON.stringify(listed).includes('sk-sdk'), 'list shows the secret')
      // The sandbox runs code as any other.
      assert.equal((await sbx.runCode('6 * 7')).text, '42')
    }, {
      network: {
        allowOut: ({ rules }) => [...rules.keys(), 'pypi.org'],
        denyOut: ({ allTraffic }) => [allTraffic],
        rules: { 'API.example.com': [{ transform: { headers: { Authorization: SECRET } } }] },
        allowPublicTraffic: false,
      },
    })
  })

  test('updateNetwork replaces the egress rules whole; allowInternetAccess false denies all traffic', N, async () => {
    await withSandbox(async (sbx) => {
      await sbx.updateNetwork({
        allowOut: ['files.pythonhosted.org'],
        rules: { '*.example.com': [{ transform: { headers: { 'X-Api-Key': SECRET } } }, { transform: { headers: { 'X-Org': 'o' } } }] },
        allowInternetAccess: false,
      })
      let info = await sbx.getInfo()
      assert.deepEqual(info.network.allowOut, ['files.pythonhosted.org'])
      assert.deepEqual(info.network.denyOut, ['0.0.0.0/0'])
      assert.deepEqual(info.network.rules, { '*.example.com': [{ transform: { headers: { 'X-Api-Key': '', 'X-Org': '' } } }] })
      assert.equal(info.network.allowPublicTraffic, true, 'the update keeps allowPublicTraffic')
      assert.ok(!JSON.stringify(info).includes('sk-sdk'))

      await Sandbox.updateNetwork(sbx.sandboxId, {}) // omitting a field clears it
      info = await sbx.getInfo()
      assert.equal(info.network.allowOut, undefined)
      assert.equal(info.network.denyOut, undefined)
      assert.equal(info.network.rules, undefined)
      assert.equal(info.allowInternetAccess, true)
    }, { network: { allowOut: ['pypi.org'], allowPublicTraffic: true } })
  })

  test('allowInternetAccess alone gives network under the server default; without it the sandbox is sealed', N, async () => {
    await withSandbox(async (sbx) => {
      const info = await sbx.getInfo()
      assert.equal(info.allowInternetAccess, true)
      assert.deepEqual(info.network, { allowOut: undefined, denyOut: undefined, rules: undefined, egressProxy: undefined,
        allowPublicTraffic: false, maskRequestHost: undefined, httpsPorts: undefined })
    }, { allowInternetAccess: true })
    await withSandbox(async (sbx) => {
      const info = await sbx.getInfo()
      assert.equal(info.allowInternetAccess, false)
      assert.equal(info.network, undefined)
      await assert.rejects(sbx.updateNetwork({ allowOut: ['pypi.org'] }),
        (e) => e instanceof SandboxError && e.statusCode === 409 && /has no network/.test(e.message))
    })
  })

  test('refusals name what is wrong: a bad entry, an option sandboxd does not offer', N, async () => {
    await assert.rejects(Sandbox.create({ network: { allowOut: ['ok.example.com', 'not_a_domain.com'] } }),
      (e) => e instanceof SandboxError && e.statusCode === 400 && /"not_a_domain.com"/.test(e.message))
    await assert.rejects(Sandbox.create({ network: { egressProxy: { address: 'proxy.example.com:1080' } } }),
      (e) => e instanceof SandboxError && e.statusCode === 400 && /egressProxy is not supported/.test(e.message))
    await assert.rejects(Sandbox.create({ network: { rules: { 'api.example.com': [{ transform: { headers: { Host: 'evil.example' } } }] } } }),
      (e) => e instanceof SandboxError && e.statusCode === 400 && /"Host"/.test(e.message))
  })
})
