'use strict'
// A consumer-group member in a process of its own, for group.test.cjs.
//
// Usage: node group_member.cjs URL STREAM TOPIC GROUP MEMBER_ID DELAY_MS
//
// Prints one JSON line per event: {"assignment": [...]} when it changes,
// {"committing": [partition, offset]} once a record is handled and its commit is sent,
// {"committed": [partition, offset]} once that commit is stored (commit after handling).
// Runs until killed; an unexpected error is printed as {"error": ...} and ends it (1).
const rill = require('..')

const say = (event) => process.stdout.write(`${JSON.stringify(event)}\n`)
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

async function main([url, stream, topicName, group, memberId, delayMs]) {
  const client = await rill.Rill.connect(url)
  const consumer = await client.stream(stream).topic(topicName).consumerGroup(group, {
    memberId,
    autoCommit: false,
    maxWaitMs: 100,
    pollIntervalMs: 5,
    sessionTimeoutMs: 3000,
  })
  let last = null
  for (;;) {
    try {
      const record = await consumer.nextWithin(100)
      await sleep(Number(delayMs)) // "handling" it
      say({ committing: [record.partition, record.offset] })
      await consumer.commit(record)
      say({ committed: [record.partition, record.offset] })
    } catch (e) {
      // NotAssigned: the partition moved meanwhile; its next owner reads it again.
      if (!(e instanceof rill.TimeoutError) && !(e instanceof rill.NotAssignedError)) throw e
    }
    const assignment = [...consumer.assignment()].sort((a, b) => a - b)
    if (JSON.stringify(assignment) !== JSON.stringify(last)) {
      say({ assignment })
      last = assignment
    }
  }
}

main(process.argv.slice(2)).catch((e) => {
  say({ error: `${e && e.constructor && e.constructor.name}: ${e && e.message}` })
  process.exit(1)
})
