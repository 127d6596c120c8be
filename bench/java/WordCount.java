// The word count of bench/streams_vs_kafka_streams.py in Kafka Streams: KIP-28's processor
// API word count, the same topology as logmarshal.streams.examples.word_count. Each task counts
// the words of its partition's lines in a persistent (RocksDB), cached, changelogged store
// "counts" and, every second of stream time, forwards the counts changed since to the sink.
//
//   java -cp CLASSES:JARS/* WordCount BOOTSTRAP APPLICATION_ID SOURCE SINK STATE_DIR RECORDS \
//        [GUARANTEE]
//
// GUARANTEE is StreamsConfig's processing.guarantee: exactly_once_v2 (the default here) or
// at_least_once (to show what the transactions cost).
// Runs until RECORDS input records were processed, closes (a clean close commits the last
// transaction), prints "first <epoch ms>" at the first record and "done <epoch ms>" after the
// close, then waits for its stdin to close so that the bench can read /proc/<pid>/stat first.

import java.time.Duration;
import java.util.HashSet;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.atomic.AtomicLong;
import java.util.regex.Pattern;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.processor.PunctuationType;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;

public final class WordCount {
    /** Input records processed so far, by the one stream thread. */
    static final AtomicLong PROCESSED = new AtomicLong();
    /** Python's str.split(): runs of whitespace (compiled once; String.split would compile
     * a regex of two characters for every line). */
    static final Pattern WHITESPACE = Pattern.compile("\\s+");

    /** KIP-28's word count processor: per-task counts, changed ones forwarded every second. */
    static final class CountProcessor implements Processor<String, String, String, Long> {
        private ProcessorContext<String, Long> context;
        private KeyValueStore<String, Long> store;
        private final Set<String> changed = new HashSet<>();

        @Override
        public void init(ProcessorContext<String, Long> context) {
            this.context = context;
            this.store = context.getStateStore("counts");
            context.schedule(Duration.ofSeconds(1), PunctuationType.STREAM_TIME, this::punctuate);
        }

        @Override
        public void process(Record<String, String> record) {
            String line = record.value() == null ? "" : record.value().toLowerCase();
            for (String word : WHITESPACE.split(line)) {
                if (word.isEmpty()) {
                    continue;
                }
                Long n = store.get(word);
                store.put(word, n == null ? 1L : n + 1);
                changed.add(word);
            }
            PROCESSED.incrementAndGet();
        }

        private void punctuate(long timestamp) {
            for (String word : new TreeSet<>(changed)) {
                context.forward(new Record<>(word, store.get(word), timestamp));
            }
            changed.clear();
        }
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String applicationId = args[1];
        String source = args[2];
        String sink = args[3];
        String stateDir = args[4];
        long records = Long.parseLong(args[5]);
        String guarantee = args.length > 6 ? args[6] : StreamsConfig.EXACTLY_ONCE_V2;

        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, applicationId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);  // the default under EOS
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        props.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");

        Topology topology = new Topology();
        topology.addSource("lines", Serdes.String().deserializer(), Serdes.String().deserializer(),
                source);
        topology.addProcessor("count", CountProcessor::new, "lines");
        topology.addStateStore(
                Stores.keyValueStoreBuilder(Stores.persistentKeyValueStore("counts"),
                        Serdes.String(), Serdes.Long()).withCachingEnabled(),
                "count");
        topology.addSink("out", sink, Serdes.String().serializer(), Serdes.Long().serializer(),
                "count");

        KafkaStreams streams = new KafkaStreams(topology, props);
        streams.setUncaughtExceptionHandler(exc -> {
            exc.printStackTrace();
            System.out.println("failed " + exc);
            System.out.flush();
            Runtime.getRuntime().halt(3);
            return null;
        });
        streams.start();
        while (PROCESSED.get() == 0) {
            Thread.sleep(1);
        }
        System.out.println("first " + System.currentTimeMillis());
        System.out.flush();
        while (PROCESSED.get() < records) {
            Thread.sleep(5);
        }
        if (!streams.close(Duration.ofSeconds(120))) {
            System.out.println("failed close timed out");
            System.out.flush();
            Runtime.getRuntime().halt(4);
        }
        System.out.println("done " + System.currentTimeMillis() + " " + PROCESSED.get());
        System.out.flush();
        while (System.in.read() != -1) {
            // the bench closes our stdin once it has read our CPU time
        }
        System.exit(0);
    }
}
