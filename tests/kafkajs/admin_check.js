// KafkaJS admin against a loglake cluster: describeCluster, createTopics, alterConfigs
// (the non-incremental AlterConfigs API), describeConfigs, produce and fetch offsets.
// Usage: node admin_check.js BOOTSTRAP TOPIC  (kafkajs resolved through NODE_PATH)
// Prints one JSON object with what it saw.
const { Kafka, ConfigResourceTypes, logLevel } = require('kafkajs');

async function main() {
  const [bootstrap, topic] = process.argv.slice(2);
  const kafka = new Kafka({ clientId: 'kafkajs-check', brokers: bootstrap.split(','),
                            logLevel: logLevel.NOTHING, retry: { retries: 3 } });
  const admin = kafka.admin();
  await admin.connect();
  const out = {};
  try {
    out.cluster = await admin.describeCluster();
    out.created = await admin.createTopics({
      topics: [{ topic, numPartitions: 1, configEntries: [{ name: 'cleanup.policy', value: 'compact' }] }],
      waitForLeaders: true });
    await admin.alterConfigs({ validateOnly: false, resources: [{
      type: ConfigResourceTypes.TOPIC, name: topic,
      configEntries: [{ name: 'retention.ms', value: '3600000' }] }] });
    const described = await admin.describeConfigs({ includeSynonyms: false, resources: [{
      type: ConfigResourceTypes.TOPIC, name: topic,
      configNames: ['retention.ms', 'cleanup.policy'] }] });
    out.configs = Object.fromEntries(described.resources[0].configEntries.map(
      (e) => [e.configName, { value: e.configValue, isDefault: e.isDefault }]));
    const producer = kafka.producer();
    await producer.connect();
    await producer.send({ topic, messages: [{ key: 'k', value: 'a' }, { key: 'k', value: 'b' }] });
    await producer.disconnect();
    out.offsets = await admin.fetchTopicOffsets(topic);
  } finally {
    await admin.disconnect();
  }
  console.log(JSON.stringify(out));
}

main().catch((err) => { console.error(err.stack || String(err)); process.exit(1); });
