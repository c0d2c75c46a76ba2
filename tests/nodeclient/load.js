// load.js - a Node.js driver workload in timed steps, the way an application (or a
// mongosh script) drives a server: bulk inserts, finds, aggregations, a delete.
//
// USAGE: node load.js URI [SECONDS_PER_STEP]     (NODE_PATH: a folder holding `mongodb`)
//
// Prints nothing on stdout while it runs (no load-tool adapter reads it: record finds
// its phases in the server's traffic). At its end it prints one JSON line on stderr:
// {"steps": [{"name", "start", "end", "ops"}], "driver": VERSION}, times in epoch
// seconds, so a test can check the phases found against what the client did.
// client.close() sends endSessions with moreToCome (OP_MSG flagBits 0x2): a request
// that asks for no reply, as every Node.js application, mongosh and Compass end.
"use strict";
const { MongoClient } = require("mongodb");
const { version } = require("mongodb/package.json");

const uri = process.argv[2];
const secs = Number(process.argv[3] || "2");
if (!uri) {
    console.error("usage: node load.js URI [SECONDS_PER_STEP]");
    process.exit(2);
}

async function timed(name, steps, length, once) {
    const start = Date.now() / 1e3;
    let ops = 0;
    while (Date.now() / 1e3 - start < length) ops += await once(ops);
    steps.push({ name, start, end: Date.now() / 1e3, ops });
}

async function main() {
    const client = new MongoClient(uri, { maxPoolSize: 4 });
    await client.connect();
    const coll = client.db("nodeload").collection("docs");
    await coll.drop().catch(() => {});              // a fresh collection each run
    const steps = [];
    let next = 0;
    // 10 documents per insert command: a bulk insert as applications batch them
    await timed("insert", steps, secs, async () => {
        const docs = [];
        for (let i = 0; i < 10; i++) docs.push({ _id: next++, k: next % 100, pad: "x".repeat(64) });
        await coll.insertMany(docs, { ordered: true });
        return 1;
    });
    await timed("find", steps, secs, async (n) => {
        await coll.find({ k: n % 100 }).limit(5).toArray();
        return 1;
    });
    // a short step (half the others): its requests must stay one phase
    await timed("aggregate", steps, secs / 2, async (n) => {
        await coll.aggregate([{ $match: { k: { $lt: n % 100 } } },
                              { $group: { _id: null, c: { $sum: 1 } } }]).toArray();
        return 1;
    });
    const t = Date.now() / 1e3;
    const del = await coll.deleteMany({ k: { $gte: 50 } });
    steps.push({ name: "delete", start: t, end: Date.now() / 1e3, ops: 1, deleted: del.deletedCount });
    await client.close();                           // endSessions, moreToCome
    console.error(JSON.stringify({ steps, driver: version }));
}

main().catch((e) => {
    console.error(`load.js: ${e.message}`);
    process.exit(1);
});
