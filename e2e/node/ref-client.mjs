// Reference client for wire comparisons (e2e/reference_test.go).
//
// It reads the same input JSON as e2e/e2e-cli (e2e/e2e-cli/README.md, input: writeKey,
// apiHost, sequences[].delayMs/events, config.flushAt, config.flushInterval,
// config.maxRetries, config.timeout, config.oauth), sends the events with the official
// @segment/analytics-node client, calls closeAndFlush, and prints one JSON
// line on stdout:
//
//   {"success": bool, "requests": N, "delivered": N, "failed": N,
//    "events": [{"messageId", "outcome": "delivered"|"failed"|"none",
//                "error"?, "callbacks": N}]}
//
// Usage: node ref-client.mjs --input-file PATH   (or --input '<json>')
//
// Diagnostics go to stderr. Exit code 0 when every event was delivered.

import { readFileSync } from 'node:fs'
import { Analytics } from '@segment/analytics-node'

function fail(message) {
  process.stdout.write(JSON.stringify({ success: false, error: message }) + '\n')
  process.exit(1)
}

function readInput(argv) {
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]
    if (a === '--input-file') return readFileSync(argv[i + 1] === '-' ? 0 : argv[i + 1], 'utf8')
    if (a.startsWith('--input-file=')) return readFileSync(a.slice('--input-file='.length), 'utf8')
    if (a === '--input') return argv[i + 1]
    if (a.startsWith('--input=')) return a.slice('--input='.length)
  }
  return undefined
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

// params maps an input event to the analytics-node call parameters.
function params(ev) {
  const common = {
    userId: ev.userId,
    anonymousId: ev.anonymousId,
    messageId: ev.messageId,
    timestamp: ev.timestamp,
    context: ev.context,
    integrations: ev.integrations,
  }
  switch (ev.type) {
    case 'track':
      return { ...common, event: ev.event, properties: ev.properties }
    case 'identify':
      return { ...common, traits: ev.traits }
    case 'group':
      return { ...common, groupId: ev.groupId, traits: ev.traits }
    case 'page':
    case 'screen':
      return { ...common, name: ev.name, category: ev.category, properties: ev.properties }
    case 'alias':
      return { ...common, previousId: ev.previousId }
    default:
      return undefined
  }
}

async function main() {
  const raw = readInput(process.argv.slice(2))
  if (raw === undefined) fail('missing --input or --input-file')
  let input
  try {
    input = JSON.parse(raw)
  } catch (err) {
    fail(`invalid input JSON: ${err.message}`)
  }
  const cfg = input.config ?? {}
  const analytics = new Analytics({
    writeKey: input.writeKey,
    host: input.apiHost,
    flushAt: cfg.flushAt,
    flushInterval: cfg.flushInterval,
    maxRetries: cfg.maxRetries,
    httpRequestTimeout: cfg.httpTimeoutMs,
    // config.oauth of the e2e-cli input, mapped to analytics-node's names
    oauthSettings: cfg.oauth
      ? {
          clientId: cfg.oauth.clientId,
          keyId: cfg.oauth.keyId,
          clientKey: cfg.oauth.privateKeyPem,
          authServer: cfg.oauth.authServer,
          scope: cfg.oauth.scope,
        }
      : undefined,
  })
  let requests = 0
  analytics.on('http_request', () => {
    requests++
  })
  analytics.on('error', (err) => {
    process.stderr.write(`analytics-node error: ${err?.code} ${err?.reason}\n`)
  })

  const results = []
  for (const seq of input.sequences ?? []) {
    if (seq.delayMs) await sleep(seq.delayMs)
    for (const ev of seq.events ?? []) {
      const p = params(ev)
      if (p === undefined) fail(`unknown event type ${JSON.stringify(ev.type)}`)
      const r = { messageId: ev.messageId ?? '', outcome: 'none', callbacks: 0 }
      results.push(r)
      analytics[ev.type](p, (err, ctx) => {
        r.callbacks++
        if (ctx?.event?.messageId) r.messageId = ctx.event.messageId
        if (err) {
          r.outcome = 'failed'
          r.error = String(err?.message ?? err)
        } else {
          r.outcome = 'delivered'
        }
      })
    }
  }
  await analytics.closeAndFlush({ timeout: (cfg.timeout ?? 10) * 1000 })

  const delivered = results.filter((r) => r.outcome === 'delivered').length
  const failed = results.filter((r) => r.outcome === 'failed').length
  const success = delivered === results.length
  process.stdout.write(JSON.stringify({ success, requests, delivered, failed, events: results }) + '\n')
  process.exit(success ? 0 : 1)
}

main().catch((err) => fail(String(err?.stack ?? err)))
