// Pitch-preserving time stretching of mono audio, for the `speed` of POST /v1/audio/speech
// (vLLM-Omni stretches the finished utterance the same way, with librosa's time_stretch).
//
// The method is WSOLA (waveform-similarity overlap-add): the output is built from Hann-windowed
// 40 ms segments of the input laid down every 20 ms; each segment is read from near where the
// tempo says it should come from, shifted by up to 10 ms to the offset whose start best matches
// (normalised cross-correlation) the input that naturally follows the previous segment. Joining
// segments where the waveforms agree keeps every period intact, so pitch and timbre stay and
// only the duration changes. 40 ms holds at least three periods of any speaking voice (pitch
// above 75 Hz) and the 10 ms search covers a whole period of voices above 100 Hz.
//
// Pure function of its arguments; safe to call from any thread.
#pragma once

#include <span>
#include <vector>

namespace omni::media {

// OpenAI's range of `speed`.
inline constexpr double kMinSpeed = 0.25;
inline constexpr double kMaxSpeed = 4.0;

// The same speech `speed` times faster: round(samples.size() / speed) samples at the same
// sample rate. Speed 1 returns the samples unchanged; empty input gives empty output.
// Throws omni::Error(kInvalidArgument) naming `speed` when it is outside [kMinSpeed, kMaxSpeed]
// or not finite, and naming the sample rate when it is not positive.
std::vector<float> time_stretch(std::span<const float> samples, double speed, int sample_rate);

}  // namespace omni::media
