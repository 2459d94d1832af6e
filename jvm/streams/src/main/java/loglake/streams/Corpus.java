package loglake.streams;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.TreeMap;

/**
 * The deterministic input of the word-count-with-join topology and the output it must give.
 *
 * <p>Line {@code i} (its record key is {@code "line-<i>"}) holds {@link #WORDS_PER_LINE} words
 * drawn from a vocabulary of {@link #VOCABULARY} words {@code w00..w39} by a {@link Random}
 * seeded with {@code i}, so any process computes the same lines. Word {@code k} has the label
 * {@code L<k % 4>} unless {@code k % 8 == 7}: those words have no label, so the inner join drops
 * them.
 */
final class Corpus {
    static final int VOCABULARY = 40;
    static final int WORDS_PER_LINE = 6;
    static final int LABELS = 4;

    private Corpus() {
    }

    static String word(int index) {
        return String.format("w%02d", index);
    }

    static String line(long index) {
        Random random = new Random(index * 7919L + 17L);
        List<String> words = new ArrayList<>();
        for (int i = 0; i < WORDS_PER_LINE; i++) {
            words.add(word(random.nextInt(VOCABULARY)));
        }
        return String.join(" ", words);
    }

    /** word -> label, for the words that have one. */
    static Map<String, String> labels() {
        Map<String, String> labels = new TreeMap<>();
        for (int k = 0; k < VOCABULARY; k++) {
            if (k % 8 != 7) {
                labels.put(word(k), "L" + (k % LABELS));
            }
        }
        return labels;
    }

    /** word -> count over lines [0, lines). */
    static Map<String, Long> counts(long lines) {
        Map<String, Long> counts = new TreeMap<>();
        for (long i = 0; i < lines; i++) {
            for (String word : line(i).split(" ")) {
                counts.merge(word, 1L, Long::sum);
            }
        }
        return counts;
    }

    /** word -> "label:count" for counted words that have a label (the join's output). */
    static Map<String, String> labeled(Map<String, Long> counts) {
        Map<String, String> labels = labels();
        Map<String, String> labeled = new TreeMap<>();
        counts.forEach((word, count) -> {
            String label = labels.get(word);
            if (label != null) {
                labeled.put(word, label + ":" + count);
            }
        });
        return labeled;
    }

    /** label -> sum of the counts of its words. */
    static Map<String, Long> labelTotals(Map<String, Long> counts) {
        Map<String, String> labels = labels();
        Map<String, Long> totals = new TreeMap<>();
        counts.forEach((word, count) -> {
            String label = labels.get(word);
            if (label != null) {
                totals.merge(label, count, Long::sum);
            }
        });
        return totals;
    }
}
