package ai.pocket;

/** The score of one candidate continuation (see {@link Session#score(String, String...)}). */
public final class CandidateScore {
  private final int index;
  private final String candidate;
  private final int nTokens;
  private final double logprob;
  private final double probability;

  CandidateScore(int index, String candidate, int nTokens, double logprob, double probability) {
    this.index = index;
    this.candidate = candidate;
    this.nTokens = nTokens;
    this.logprob = logprob;
    this.probability = probability;
  }

  /** Position in the caller's candidate list. */
  public int index() {
    return index;
  }

  /** The candidate's text. */
  public String candidate() {
    return candidate;
  }

  /** Tokens the candidate was scored as. */
  public int nTokens() {
    return nTokens;
  }

  /** log p(candidate | prompt): the sum over its tokens. */
  public double logprob() {
    return logprob;
  }

  /** exp(logprob) normalized over the candidates. */
  public double probability() {
    return probability;
  }

  @Override
  public String toString() {
    return "CandidateScore{" + index + " \"" + candidate + "\" tokens=" + nTokens + " logprob="
        + logprob + " p=" + probability + "}";
  }
}
