/**
 * Java bindings of pocket, an on-device language-model runtime, over its C API.
 *
 * <p>{@link ai.pocket.Model} loads a model; {@link ai.pocket.Session} generates, streams, scores
 * and classifies with it; {@link ai.pocket.Adapter} is a LoRA adapter. All three are {@link
 * java.lang.AutoCloseable}: a closed object throws {@link java.lang.IllegalStateException} from
 * its methods, and native memory is freed once nothing uses it (a Session keeps its Model and
 * Adapters alive; a call in progress keeps its Session alive). Errors pocket reports are {@link
 * ai.pocket.PocketException}s carrying a {@link ai.pocket.Status}; null arguments are {@link
 * java.lang.NullPointerException}s naming the argument.
 *
 * <p>The native library is {@code libpocket_jni.so} (loaded with {@code
 * System.loadLibrary("pocket_jni")}, or from the path in the system property {@code
 * pocket.jni.library}), which links {@code libpocket.so}.
 */
package ai.pocket;
