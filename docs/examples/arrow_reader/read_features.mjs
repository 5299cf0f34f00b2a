// Fetch one request's SOLARIS features from `solaris serve` and print them.
//
//   npm ci && node read_features.mjs http://127.0.0.1:8650 42 7,9,11 [now]
//
// The body is the item ids as little-endian int64; the answer is one Arrow IPC record
// batch (docs/serving_http.md): item_id, tier, one fixed-size list per tier (null where
// the tier is missing: the VM's mask) and each view's Feast FieldStatus.
import { tableFromIPC } from "apache-arrow";

const [base, user, items, now] = process.argv.slice(2);
const ids = new BigInt64Array(items.split(",").map(BigInt));
const view = new DataView(ids.buffer);
ids.forEach((id, k) => view.setBigInt64(8 * k, id, true)); // little-endian on any host

const query = `user_id=${user}` + (now ? `&now=${now}` : "");
const response = await fetch(`${base}/v1/features?${query}`, {
  method: "POST",
  headers: { "Content-Type": "application/octet-stream" },
  body: ids.buffer,
});
if (!response.ok) {
  throw new Error(`${response.status}: ${await response.text()}`); // names what was wrong
}
const table = tableFromIPC(new Uint8Array(await response.arrayBuffer()));
console.log(`fetch ${response.headers.get("solaris-fetch")}, ${table.numRows} rows`);
for (const row of table) {
  const tiers = ["pair", "nbr", "uagg", "iagg"].map((tier) => {
    const z = row[tier]; // null where the tier is missing
    return z === null ? `${tier}: -` : `${tier}: [${Array.from(z).slice(0, 3).join(", ")}, ...]`;
  });
  console.log(`item ${row.item_id}: tier ${row.tier}; ${tiers.join("; ")}; pair status ${row.pair_status}`);
}
