// make-vectors.mjs writes ../vectors.json: for every sender preset, a
// genuine delivery signed by the sender's own SDK (or, where the SDK has
// no signer, by the algorithm its documentation gives), and the same
// delivery under a wrong secret, with a changed body, and with a stale
// and a future timestamp where the sender signs one. Each vector's
// sdk_valid is what the sender's SDK's own verifier says of it; want is
// what the gateway must say, the same unless note says why not.
//
//   npm ci && node make-vectors.mjs
//
// The SDK versions are pinned in package.json; the clock is fixed, so
// the file is the same on every run.
import { createHmac, createHash } from 'node:crypto';
import { writeFileSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const NOW = 1767225600; // 2026-01-01T00:00:00Z

// The SDKs read the clock as Date.now() or new Date(): both are fixed.
const RealDate = Date;
class FixedDate extends RealDate {
  constructor(...args) { super(...(args.length ? args : [NOW * 1000])); }
  static now() { return NOW * 1000; }
}
globalThis.Date = FixedDate;

const Stripe = require('stripe');
const { sign: octokitSign, verify: octokitVerify } = await import('@octokit/webhooks-methods');
require('@shopify/shopify-api/adapters/node');
const { shopifyApi, ApiVersion } = require('@shopify/shopify-api');
const { isValidSlackRequest } = require('@slack/bolt');
const twilio = require('twilio');
const { Paddle, WebhooksValidator } = require('@paddle/paddle-node-sdk');
const { WebhooksHelper } = require('square');
const { Webhook: StandardWebhook } = require('standardwebhooks');
const { Webhook: SvixWebhook } = await import('svix');

const versions = {};
for (const name of Object.keys(JSON.parse(readFileSync('package.json', 'utf8')).dependencies)) {
  versions[name] = JSON.parse(readFileSync(`node_modules/${name}/package.json`, 'utf8')).version;
}

const vectors = [];
// add records one vector; headers are the request's, body its raw text.
function add(sender, kase, secret, headers, body, sdkValid, extra = {}) {
  const v = { sender, case: kase, secret, headers, body, now: NOW, sdk_valid: !!sdkValid, want: !!sdkValid, ...extra };
  vectors.push(v);
  return v;
}
const hex = (alg, key, data) => createHmac(alg, key).update(data).digest('hex');
const b64 = (alg, key, data) => createHmac(alg, key).update(data).digest('base64');
const FUTURE_NOTE = "the SDK refuses only stale timestamps; the gateway refuses one beyond the tolerance either way, as a clock skew of that size is not the sender's";

// --- Stripe: stripe.webhooks.generateTestHeaderString signs, constructEvent verifies (tolerance 300s).
{
  const stripe = new Stripe('sk_test_vectors_only');
  const secret = 'whsec_vectorsStripeSigningSecret0123';
  const body = JSON.stringify({ id: 'evt_1QvEctors', object: 'event', type: 'payment_intent.succeeded', data: { object: { id: 'pi_1', amount: 4200 } } }, null, 2);
  const ok = (header, payload = body, s = secret) => {
    try { stripe.webhooks.constructEvent(payload, header, s); return true; } catch { return false; }
  };
  const hdr = (ts, s = secret) => stripe.webhooks.generateTestHeaderString({ payload: body, secret: s, timestamp: ts });
  const g = hdr(NOW);
  add('stripe', 'genuine', secret, { 'Stripe-Signature': g }, body, ok(g));
  const w = hdr(NOW, 'whsec_anotherSecretOfSomebodyElse0');
  add('stripe', 'wrong secret', secret, { 'Stripe-Signature': w }, body, ok(w));
  add('stripe', 'changed body', secret, { 'Stripe-Signature': g }, body.replace('4200', '4201'), ok(g, body.replace('4200', '4201')));
  const stale = hdr(NOW - 301);
  add('stripe', 'stale timestamp', secret, { 'Stripe-Signature': stale }, body, ok(stale));
  const future = hdr(NOW + 301);
  const v = add('stripe', 'future timestamp', secret, { 'Stripe-Signature': future }, body, ok(future));
  if (v.sdk_valid) { v.want = false; v.note = FUTURE_NOTE; }
}

// --- GitHub: @octokit/webhooks-methods sign and verify. GitHub signs no timestamp.
{
  const secret = 'a GitHub webhook secret, 40 bytes long..';
  const body = JSON.stringify({ action: 'opened', number: 7, pull_request: { id: 1, title: 'vectors' } });
  const g = await octokitSign(secret, body);
  add('github', 'genuine', secret, { 'X-Hub-Signature-256': g, 'X-GitHub-Delivery': '72d3162e-cc78-11e3-81ab-4c9367dc0958' }, body, await octokitVerify(secret, body, g));
  const w = await octokitSign('somebody else entirely, 36 bytes...', body);
  add('github', 'wrong secret', secret, { 'X-Hub-Signature-256': w, 'X-GitHub-Delivery': '72d3162e-cc78-11e3-81ab-4c9367dc0958' }, body, await octokitVerify(secret, body, w));
  const changed = body.replace('vectors', 'vectorz');
  add('github', 'changed body', secret, { 'X-Hub-Signature-256': g, 'X-GitHub-Delivery': '72d3162e-cc78-11e3-81ab-4c9367dc0958' }, changed, await octokitVerify(secret, changed, g));
}

// --- Shopify: the SDK has no signer; Shopify documents the signature as
// the base64 HMAC-SHA256 of the raw body under the app's secret, and
// shopify.webhooks.validate (with its node adapter) verifies it.
{
  const secret = 'shpss_0123456789abcdef0123456789abcdef';
  const shopify = shopifyApi({ apiKey: 'vectors', apiSecretKey: secret, scopes: [], hostName: 'vectors.example', apiVersion: ApiVersion.October25, isEmbeddedApp: false, logger: { level: 0 } });
  const body = JSON.stringify({ id: 820982911946154508, email: 'jon@example.com', total_price: '42.00' });
  const headers = (hmac) => ({
    'X-Shopify-Hmac-Sha256': hmac, 'X-Shopify-Topic': 'orders/create', 'X-Shopify-Shop-Domain': 'vectors.myshopify.com',
    'X-Shopify-API-Version': '2025-10', 'X-Shopify-Webhook-Id': 'b54557e4-bdd9-4b37-8a5f-bf7d70bcd043', 'X-Shopify-Event-Id': '98880550-7158-44d4-b7cd-2c97c8a091b5',
  });
  const ok = async (h, raw) => {
    const rawRequest = { headers: Object.fromEntries(Object.entries(h).map(([k, v]) => [k.toLowerCase(), v])), method: 'POST', url: '/webhooks/shopify' };
    const r = await shopify.webhooks.validate({ rawBody: raw, rawRequest, rawResponse: {} });
    return r.valid;
  };
  const g = b64('sha256', secret, body);
  add('shopify', 'genuine', secret, headers(g), body, await ok(headers(g), body));
  const w = b64('sha256', 'shpss_ffffffffffffffffffffffffffffffff', body);
  add('shopify', 'wrong secret', secret, headers(w), body, await ok(headers(w), body));
  const changed = body.replace('42.00', '0.01');
  add('shopify', 'changed body', secret, headers(g), changed, await ok(headers(g), changed));
}

// --- Slack: @slack/bolt's isValidSlackRequest verifies; Slack's
// "Verifying requests from Slack" gives the signer: v0= and the hex
// HMAC-SHA256 of v0:<timestamp>:<body>.
{
  const secret = '8f742231b10e8888abcd99yyyzzz85a5';
  const body = JSON.stringify({ token: 'x', team_id: 'T1DC2JH3J', event_id: 'Ev08VECTORS', event_time: NOW, type: 'event_callback', event: { type: 'app_mention', text: 'hi' } });
  const sig = (ts, s = secret, raw = body) => 'v0=' + hex('sha256', s, `v0:${ts}:${raw}`);
  const headers = (ts, s) => ({ 'X-Slack-Signature': sig(ts, s), 'X-Slack-Request-Timestamp': String(ts) });
  const ok = (h, raw = body) => isValidSlackRequest({ signingSecret: secret, body: raw, headers: { 'x-slack-signature': h['X-Slack-Signature'], 'x-slack-request-timestamp': Number(h['X-Slack-Request-Timestamp']) }, nowMilliseconds: NOW * 1000 });
  add('slack', 'genuine', secret, headers(NOW), body, ok(headers(NOW)));
  add('slack', 'wrong secret', secret, headers(NOW, 'ffffffffffffffffffffffffffffffff'), body, ok(headers(NOW, 'ffffffffffffffffffffffffffffffff')));
  const changed = body.replace('hi', 'ho');
  add('slack', 'changed body', secret, headers(NOW), changed, ok(headers(NOW), changed));
  add('slack', 'stale timestamp', secret, headers(NOW - 301), body, ok(headers(NOW - 301)));
  const v = add('slack', 'future timestamp', secret, headers(NOW + 301), body, ok(headers(NOW + 301)));
  if (v.sdk_valid) { v.want = false; v.note = FUTURE_NOTE; }
}

// --- Twilio: twilio.getExpectedTwilioSignature signs and
// twilio.validateRequest / validateRequestWithBody verify: the full URL
// and the sorted form parameters, or for JSON the URL with bodySHA256.
{
  const secret = '0123456789abcdef0123456789abcdef';
  const url = 'https://hooks.example.com/webhooks/twilio?tenant=acme';
  const form = { MessageSid: 'SM0123456789abcdef0123456789abcdef', AccountSid: 'AC0123', From: '+15005550006', To: '+15005550001', Body: 'Hello & welcome', MessageStatus: 'delivered' };
  const body = new URLSearchParams(form).toString();
  const headers = (sig) => ({ 'X-Twilio-Signature': sig, 'Content-Type': 'application/x-www-form-urlencoded', 'I-Twilio-Idempotency-Token': 'b5f8c3e0-vectors-0001' });
  const parse = (raw) => Object.fromEntries(new URLSearchParams(raw));
  const g = twilio.getExpectedTwilioSignature(secret, url, form);
  add('twilio', 'genuine', secret, headers(g), body, twilio.validateRequest(secret, g, url, form), { url });
  const w = twilio.getExpectedTwilioSignature('ffffffffffffffffffffffffffffffff', url, form);
  add('twilio', 'wrong secret', secret, headers(w), body, twilio.validateRequest(secret, w, url, form), { url });
  const changed = body.replace('delivered', 'failed');
  add('twilio', 'changed body', secret, headers(g), changed, twilio.validateRequest(secret, g, url, parse(changed)), { url });
  const other = 'https://hooks.example.com/webhooks/twilio?tenant=other';
  add('twilio', 'another URL', secret, headers(g), body, twilio.validateRequest(secret, g, other, form), { url: other });
  const withPort = 'https://hooks.example.com:443/webhooks/twilio?tenant=acme';
  add('twilio', 'the URL with its default port', secret, headers(g), body, twilio.validateRequest(secret, g, withPort, form), { url: withPort });

  const json = JSON.stringify({ event_id: 'EVvectors', status: 'completed' });
  const jurl = 'https://hooks.example.com/webhooks/twilio?bodySHA256=' + createHash('sha256').update(json).digest('hex');
  const jheaders = (sig) => ({ 'X-Twilio-Signature': sig, 'Content-Type': 'application/json', 'I-Twilio-Idempotency-Token': 'b5f8c3e0-vectors-0002' });
  const jg = twilio.getExpectedTwilioSignature(secret, jurl, {});
  add('twilio', 'JSON body, genuine', secret, jheaders(jg), json, twilio.validateRequestWithBody(secret, jg, jurl, json), { url: jurl });
  const jchanged = json.replace('completed', 'failed');
  add('twilio', 'JSON body, changed body', secret, jheaders(jg), jchanged, twilio.validateRequestWithBody(secret, jg, jurl, jchanged), { url: jurl });
  const jw = twilio.getExpectedTwilioSignature('ffffffffffffffffffffffffffffffff', jurl, {});
  add('twilio', 'JSON body, wrong secret', secret, jheaders(jw), json, twilio.validateRequestWithBody(secret, jw, jurl, json), { url: jurl });
}

// --- Paddle: WebhooksValidator.isValidSignature verifies (5 seconds of
// tolerance); Paddle's "Verify webhook signatures" gives the signer:
// ts=<unix seconds>;h1=<hex HMAC-SHA256 of "<ts>:<body>">.
{
  const secret = 'pdl_ntfset_01vectors0000000000000_vectorsSecretKey0123';
  const body = JSON.stringify({ event_id: 'evt_01vectors', event_type: 'transaction.completed', occurred_at: '2026-01-01T00:00:00Z', data: { id: 'txn_01', total: '4200' } });
  const sig = (ts, s = secret, raw = body) => `ts=${ts};h1=${hex('sha256', s, `${ts}:${raw}`)}`;
  new Paddle('pdl_sdbx_apikey_vectorsonly'); // sets the SDK's runtime (its crypto)
  const validator = new WebhooksValidator();
  const ok = async (h, raw = body) => { try { return await validator.isValidSignature(raw, secret, h); } catch { return false; } };
  add('paddle', 'genuine', secret, { 'Paddle-Signature': sig(NOW) }, body, await ok(sig(NOW)));
  add('paddle', 'wrong secret', secret, { 'Paddle-Signature': sig(NOW, 'pdl_ntfset_01other_someoneElsesSecretKey0123') }, body, await ok(sig(NOW, 'pdl_ntfset_01other_someoneElsesSecretKey0123')));
  const changed = body.replace('4200', '1');
  add('paddle', 'changed body', secret, { 'Paddle-Signature': sig(NOW) }, changed, await ok(sig(NOW), changed));
  add('paddle', 'stale timestamp', secret, { 'Paddle-Signature': sig(NOW - 6) }, body, await ok(sig(NOW - 6)));
  const v = add('paddle', 'future timestamp', secret, { 'Paddle-Signature': sig(NOW + 6) }, body, await ok(sig(NOW + 6)));
  if (v.sdk_valid) { v.want = false; v.note = FUTURE_NOTE; }
}

// --- Square: WebhooksHelper.verifySignature verifies; Square's
// "Validate notifications" gives the signer: the base64 HMAC-SHA256 of
// the notification URL followed by the body, under the signature key.
{
  const secret = 'vectorsSquareSignatureKey0123';
  const url = 'https://hooks.example.com/webhooks/square';
  const body = JSON.stringify({ merchant_id: 'MLvectors', type: 'payment.updated', event_id: '6a8f5f28-vectors-0001', created_at: '2026-01-01T00:00:00Z', data: { id: 'pay_1' } });
  const sig = (s = secret, u = url, raw = body) => b64('sha256', s, u + raw);
  const ok = (h, raw = body, u = url) => WebhooksHelper.verifySignature({ requestBody: raw, signatureHeader: h, signatureKey: secret, notificationUrl: u });
  add('square', 'genuine', secret, { 'X-Square-Hmacsha256-Signature': sig() }, body, await ok(sig()), { url });
  add('square', 'wrong secret', secret, { 'X-Square-Hmacsha256-Signature': sig('someoneElsesSignatureKey0123') }, body, await ok(sig('someoneElsesSignatureKey0123')), { url });
  const changed = body.replace('pay_1', 'pay_2');
  add('square', 'changed body', secret, { 'X-Square-Hmacsha256-Signature': sig() }, changed, await ok(sig(), changed), { url });
  const other = 'https://hooks.example.com/webhooks/square2';
  add('square', 'another URL', secret, { 'X-Square-Hmacsha256-Signature': sig() }, body, await ok(sig(), body, other), { url: other });
}

// --- Standard Webhooks (standardwebhooks) and Svix (svix): the SDK's
// sign, and verify (5 minutes of tolerance either way).
for (const [sender, Webhook] of [['standard-webhooks', StandardWebhook], ['svix', SvixWebhook]]) {
  const secret = 'whsec_' + Buffer.from(`a ${sender} secret of 32 bytes.`.padEnd(32, '.').slice(0, 32)).toString('base64');
  const wh = new Webhook(secret);
  const body = JSON.stringify({ type: 'invoice.paid', data: { invoice: 'in_vectors', amount: 4200 } });
  const id = 'msg_2vectors' + sender.length;
  const headers = (ts, w = wh) => ({ 'webhook-id': id, 'webhook-timestamp': String(ts), 'webhook-signature': w.sign(id, new RealDate(ts * 1000), body) });
  const ok = (h, raw = body) => { try { wh.verify(raw, h); return true; } catch { return false; } };
  add(sender, 'genuine', secret, headers(NOW), body, ok(headers(NOW)));
  const other = new Webhook('whsec_' + Buffer.from('somebody else entirely, 32 bytes').toString('base64'));
  add(sender, 'wrong secret', secret, headers(NOW, other), body, ok(headers(NOW, other)));
  const changed = body.replace('4200', '4201');
  add(sender, 'changed body', secret, headers(NOW), changed, ok(headers(NOW), changed));
  add(sender, 'stale timestamp', secret, headers(NOW - 301), body, ok(headers(NOW - 301)));
  add(sender, 'future timestamp', secret, headers(NOW + 301), body, ok(headers(NOW + 301)));
}

const bad = vectors.filter((v) => v.case.endsWith('genuine') !== v.sdk_valid && !v.case.includes('default port') && !(v.note && v.case.startsWith('future')));
if (bad.length) {
  console.error('the SDKs disagree with the cases:', bad.map((v) => `${v.sender}: ${v.case}`));
  process.exit(1);
}
writeFileSync('../vectors.json', JSON.stringify({ made_by: 'signature/testdata/sdk/make-vectors.mjs', now: NOW, sdk_versions: versions, vectors }, null, 1) + '\n');
console.log(`${vectors.length} vectors, ${Object.keys(versions).length} SDKs`);
