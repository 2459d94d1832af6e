package loglake.streams;

import java.util.List;

/** The topic names of one run, all derived from a prefix. */
record Topics(String prefix) {
    String lines() {
        return prefix + "-lines";
    }

    String labels() {
        return prefix + "-labels";
    }

    String counts() {
        return prefix + "-counts";
    }

    String labeled() {
        return prefix + "-labeled";
    }

    String labelTotals() {
        return prefix + "-label-totals";
    }

    /** The topics the test creates before the topology starts (inputs and outputs). */
    List<String> external() {
        return List.of(lines(), labels(), counts(), labeled(), labelTotals());
    }
}
