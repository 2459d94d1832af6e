package loglake.streams;

/**
 * Command-line entry point; every command prints JSON on stdout.
 *
 * <ul>
 *   <li>{@code run --bootstrap B --prefix P --application-id A --state-dir D [--standby N]
 *       [--replication-factor R]}: one Kafka Streams instance of {@link WordCountJoin}, until
 *       killed (one JSON line per state change).</li>
 *   <li>{@code produce --bootstrap B --prefix P --from I --to J [--labels true]}: input lines
 *       {@code [I, J)} (and the labels table) with an idempotent producer.</li>
 *   <li>{@code verify --bootstrap B --prefix P --lines N [--timeout-s S]}: reads the outputs
 *       until they equal the expected result for N lines or S seconds pass.</li>
 * </ul>
 */
public final class Main {
    private Main() {
    }

    public static void main(String[] argv) throws Exception {
        if (argv.length == 0) {
            System.err.println("usage: Main run|produce|verify --name value ...");
            System.exit(2);
        }
        Args args = new Args(argv, 1);
        int code = switch (argv[0]) {
            case "run" -> WordCountJoin.run(args);
            case "produce" -> InputProducer.run(args);
            case "verify" -> OutputVerifier.run(args);
            default -> {
                System.err.println("unknown command " + argv[0]);
                yield 2;
            }
        };
        System.exit(code);
    }
}
