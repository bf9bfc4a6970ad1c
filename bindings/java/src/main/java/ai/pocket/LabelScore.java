package ai.pocket;

/** The score of one label of a classification head (see {@link Session#classify(String)}). */
public final class LabelScore {
  private final int index;
  private final String label;
  private final double logit;
  private final double logprob;
  private final double probability;

  LabelScore(int index, String label, double logit, double logprob, double probability) {
    this.index = index;
    this.label = label;
    this.logit = logit;
    this.logprob = logprob;
    this.probability = probability;
  }

  /** The label's row in the head. */
  public int index() {
    return index;
  }

  public String label() {
    return label;
  }

  public double logit() {
    return logit;
  }

  /** Log-softmax over the labels. */
  public double logprob() {
    return logprob;
  }

  /** exp(logprob); the labels' probabilities sum to 1. */
  public double probability() {
    return probability;
  }

  @Override
  public String toString() {
    return "LabelScore{" + index + " " + label + " logit=" + logit + " p=" + probability + "}";
  }
}
