package ai.pocket;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/**
 * The settings of one generation ({@code pocket_generate_params}); immutable, made with {@link
 * #builder()}. Unset fields keep the library's own defaults (read from libpocket, so they cannot
 * drift from the C API's): 256 tokens, temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, no
 * penalties, a random seed, thinking enabled, special-token strings read as plain text.
 *
 * <p>At most one constraint (choices, regex, JSON schema, grammar) may be given; pocket checks it
 * and reports a violation as {@link Status#INVALID_ARGUMENT}.
 */
public final class GenerateOptions {
  /** The seed that asks pocket to draw one ({@code POCKET_SEED_RANDOM}, UINT64_MAX). */
  public static final long SEED_RANDOM = -1L;

  private static final class Defaults {
    static final int[] INTS = new int[NativeLib.N_INTS];
    static final float[] FLOATS = new float[NativeLib.N_FLOATS];
    static final long SEED;

    static {
      long[] seed = new long[1];
      NativeLib.generateDefaults(INTS, FLOATS, seed);
      SEED = seed[0];
    }
  }

  private static final GenerateOptions DEFAULTS = new Builder().build();

  final int[] ints;
  final float[] floats;
  private final long seed;
  private final List<String> stopStrings;
  private final List<String> choices;
  private final String regex;
  private final String jsonSchema;
  private final String grammar;
  private final String spanSource;
  private final String spec;

  private GenerateOptions(Builder b) {
    ints = b.ints.clone();
    floats = b.floats.clone();
    seed = b.seed;
    stopStrings = Collections.unmodifiableList(new ArrayList<String>(b.stopStrings));
    choices = Collections.unmodifiableList(new ArrayList<String>(b.choices));
    regex = b.regex;
    jsonSchema = b.jsonSchema;
    grammar = b.grammar;
    spanSource = b.spanSource;
    spec = b.spec;
  }

  /** The library's defaults. */
  public static GenerateOptions defaults() {
    return DEFAULTS;
  }

  public static Builder builder() {
    return new Builder();
  }

  /** A builder starting from these options. */
  public Builder toBuilder() {
    Builder b = new Builder();
    System.arraycopy(ints, 0, b.ints, 0, ints.length);
    System.arraycopy(floats, 0, b.floats, 0, floats.length);
    b.seed = seed;
    b.stopStrings.addAll(stopStrings);
    b.choices.addAll(choices);
    b.regex = regex;
    b.jsonSchema = jsonSchema;
    b.grammar = grammar;
    b.spanSource = spanSource;
    b.spec = spec;
    return b;
  }

  public int maxTokens() {
    return ints[NativeLib.I_MAX_TOKENS];
  }

  public float temperature() {
    return floats[NativeLib.F_TEMPERATURE];
  }

  public int topK() {
    return ints[NativeLib.I_TOP_K];
  }

  public float topP() {
    return floats[NativeLib.F_TOP_P];
  }

  public float minP() {
    return floats[NativeLib.F_MIN_P];
  }

  public float repetitionPenalty() {
    return floats[NativeLib.F_REPETITION_PENALTY];
  }

  public float presencePenalty() {
    return floats[NativeLib.F_PRESENCE_PENALTY];
  }

  public float frequencyPenalty() {
    return floats[NativeLib.F_FREQUENCY_PENALTY];
  }

  /** An unsigned 64-bit seed; {@link #SEED_RANDOM} draws one. */
  public long seed() {
    return seed;
  }

  public List<String> stopStrings() {
    return stopStrings;
  }

  public List<String> choices() {
    return choices;
  }

  public String regex() {
    return regex;
  }

  public String jsonSchema() {
    return jsonSchema;
  }

  public String grammar() {
    return grammar;
  }

  public String spanSource() {
    return spanSource;
  }

  public String spec() {
    return spec;
  }

  public int draftMax() {
    return ints[NativeLib.I_DRAFT_MAX];
  }

  public int draftMin() {
    return ints[NativeLib.I_DRAFT_MIN];
  }

  public float draftPMin() {
    return floats[NativeLib.F_DRAFT_P_MIN];
  }

  public int draftBranches() {
    return ints[NativeLib.I_DRAFT_BRANCHES];
  }

  public boolean enableThinking() {
    return ints[NativeLib.I_ENABLE_THINKING] != 0;
  }

  public boolean parseSpecial() {
    return ints[NativeLib.I_PARSE_SPECIAL] != 0;
  }

  byte[][] stopStringBytes() {
    return Utf8.cStrings(stopStrings, "stopStrings");
  }

  byte[][] choiceBytes() {
    return Utf8.cStrings(choices, "choices");
  }

  /**
   * Builds {@link GenerateOptions}. Values are range-checked by pocket when generating (an invalid
   * one is a {@link PocketException} with {@link Status#INVALID_ARGUMENT} naming the field).
   */
  public static final class Builder {
    private final int[] ints = Defaults.INTS.clone();
    private final float[] floats = Defaults.FLOATS.clone();
    private long seed = Defaults.SEED;
    private final List<String> stopStrings = new ArrayList<String>();
    private final List<String> choices = new ArrayList<String>();
    private String regex;
    private String jsonSchema;
    private String grammar;
    private String spanSource;
    private String spec;

    private Builder() {}

    /** Tokens to generate at most. */
    public Builder maxTokens(int n) {
      ints[NativeLib.I_MAX_TOKENS] = n;
      return this;
    }

    /** 0 is greedy. */
    public Builder temperature(float t) {
      floats[NativeLib.F_TEMPERATURE] = t;
      return this;
    }

    /** 0 is off. */
    public Builder topK(int k) {
      ints[NativeLib.I_TOP_K] = k;
      return this;
    }

    /** 1 is off. */
    public Builder topP(float p) {
      floats[NativeLib.F_TOP_P] = p;
      return this;
    }

    /** 0 is off. */
    public Builder minP(float p) {
      floats[NativeLib.F_MIN_P] = p;
      return this;
    }

    /** 1 is off. */
    public Builder repetitionPenalty(float penalty) {
      floats[NativeLib.F_REPETITION_PENALTY] = penalty;
      return this;
    }

    public Builder presencePenalty(float penalty) {
      floats[NativeLib.F_PRESENCE_PENALTY] = penalty;
      return this;
    }

    public Builder frequencyPenalty(float penalty) {
      floats[NativeLib.F_FREQUENCY_PENALTY] = penalty;
      return this;
    }

    /**
     * A fixed seed (read as unsigned 64 bits): the same seed and inputs give the same output on
     * the same build and CPU. {@link #SEED_RANDOM} draws one; {@link GenerateResult#seed()} reports
     * the seed used either way.
     */
    public Builder seed(long seed) {
      this.seed = seed;
      return this;
    }

    /** Adds stop strings: generation ends when one appears. */
    public Builder stop(String... strings) {
      for (String s : Utf8.requireNonNull(strings, "stop strings")) {
        stopStrings.add(Utf8.requireNonNull(s, "stop string"));
      }
      return this;
    }

    /** Replaces the stop strings. */
    public Builder stopStrings(List<String> strings) {
      stopStrings.clear();
      for (String s : Utf8.requireNonNull(strings, "stopStrings")) {
        stopStrings.add(Utf8.requireNonNull(s, "stop string"));
      }
      return this;
    }

    /** The output is exactly one of these strings (none: unconstrained). */
    public Builder choices(String... values) {
      choices.clear();
      for (String s : Utf8.requireNonNull(values, "choices")) {
        choices.add(Utf8.requireNonNull(s, "choice"));
      }
      return this;
    }

    public Builder choices(List<String> values) {
      return choices(Utf8.requireNonNull(values, "choices").toArray(new String[0]));
    }

    /** The whole output matches this regular expression (null: none). */
    public Builder regex(String regex) {
      this.regex = regex;
      return this;
    }

    /** The output is JSON valid against this JSON Schema text (null: none). */
    public Builder jsonSchema(String schema) {
      this.jsonSchema = schema;
      return this;
    }

    /** The output is a sentence of this GBNF grammar (null: none). */
    public Builder grammar(String grammar) {
      this.grammar = grammar;
      return this;
    }

    /** The text span fields of a schema or grammar are copied from (null: none). */
    public Builder spanSource(String text) {
      this.spanSource = text;
      return this;
    }

    /** Speculative decoding: "none", "lookup", "draft:FILE", "dflash:DIR", "auto" (null: none). */
    public Builder spec(String spec) {
      this.spec = spec;
      return this;
    }

    public Builder draftMax(int n) {
      ints[NativeLib.I_DRAFT_MAX] = n;
      return this;
    }

    public Builder draftMin(int n) {
      ints[NativeLib.I_DRAFT_MIN] = n;
      return this;
    }

    public Builder draftPMin(float p) {
      floats[NativeLib.F_DRAFT_P_MIN] = p;
      return this;
    }

    public Builder draftBranches(int n) {
      ints[NativeLib.I_DRAFT_BRANCHES] = n;
      return this;
    }

    /** false asks a Qwen3 model to answer without reasoning (chat messages only). */
    public Builder enableThinking(boolean enable) {
      ints[NativeLib.I_ENABLE_THINKING] = enable ? 1 : 0;
      return this;
    }

    /** Recognise special-token strings in the prompt or message contents. */
    public Builder parseSpecial(boolean parse) {
      ints[NativeLib.I_PARSE_SPECIAL] = parse ? 1 : 0;
      return this;
    }

    public GenerateOptions build() {
      return new GenerateOptions(this);
    }
  }
}
