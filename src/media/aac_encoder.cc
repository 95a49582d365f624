#include "media/aac_encoder.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavutil/channel_layout.h>
#include <libavutil/error.h>
#include <libavutil/frame.h>
#include <libavutil/log.h>
}

#include <algorithm>
#include <array>
#include <mutex>
#include <vector>

#include "base/error.h"
#include "media/pcm16.h"

namespace omni::media {

namespace {

constexpr int64_t kBitrate = 64000;
// ISO 14496-3 sampling_frequency_index order.
constexpr std::array<int, 13> kAdtsRates = {96000, 88200, 64000, 48000, 44100, 32000, 24000,
                                            22050, 16000, 12000, 11025, 8000,  7350};
constexpr size_t kAdtsHeaderBytes = 7;
constexpr size_t kAdtsMaxFrameBytes = (1 << 13) - 1;  // frame_length has 13 bits

std::string av_error(int code) {
  char text[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(code, text, sizeof text);
  return text;
}

// FFmpeg logs at info level by default, and its AAC encoder prints quantizer statistics every
// time one is closed: one line per response in the server's log. Warnings and errors still show.
void quiet_ffmpeg_info_messages() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (av_log_get_level() > AV_LOG_WARNING) av_log_set_level(AV_LOG_WARNING);
  });
}

int adts_rate_index(int sample_rate) {
  auto it = std::find(kAdtsRates.begin(), kAdtsRates.end(), sample_rate);
  if (it == kAdtsRates.end()) {
    throw_error(ErrorCode::kInvalidArgument,
                "aac encoder: sample rate {} has no ADTS index (allowed: 7350, 8000, 11025, 12000, 16000, 22050, "
                "24000, 32000, 44100, 48000, 64000, 88200, 96000)",
                sample_rate);
  }
  return static_cast<int>(it - kAdtsRates.begin());
}

class AacEncoder final : public AudioEncoder {
 public:
  explicit AacEncoder(const AudioEncoderOptions& options) : sample_rate_(options.sample_rate) {
    adts_rate_index(sample_rate_);  // refuses a rate ADTS cannot carry before the codec starts
    quiet_ffmpeg_info_messages();
    const AVCodec* codec = avcodec_find_encoder(AV_CODEC_ID_AAC);
    if (!codec) throw_error(ErrorCode::kInternal, "aac encoder: this FFmpeg has no AAC encoder");
    context_ = avcodec_alloc_context3(codec);
    frame_ = av_frame_alloc();
    packet_ = av_packet_alloc();
    if (!context_ || !frame_ || !packet_) {
      release();
      throw_error(ErrorCode::kInternal, "aac encoder: out of memory");
    }
    context_->sample_fmt = AV_SAMPLE_FMT_FLTP;
    context_->sample_rate = sample_rate_;
    av_channel_layout_default(&context_->ch_layout, 1);
    context_->bit_rate = kBitrate;
    context_->profile = FF_PROFILE_AAC_LOW;
    context_->time_base = AVRational{1, sample_rate_};
    context_->thread_count = 1;
    context_->flags |= AV_CODEC_FLAG_BITEXACT;
    if (int status = avcodec_open2(context_, codec, nullptr); status < 0) {
      release();
      throw_error(ErrorCode::kInternal, "aac encoder: opening FFmpeg's AAC encoder at {} Hz failed: {}", sample_rate_,
                  av_error(status));
    }
    frame_size_ = context_->frame_size;
    small_last_frame_ = (codec->capabilities & AV_CODEC_CAP_SMALL_LAST_FRAME) != 0;
  }

  ~AacEncoder() override { release(); }

  std::string encode(std::span<const float> samples) override {
    if (finished_) throw_error(ErrorCode::kInternal, "aac encoder: encode() after finish()");
    for (float sample : samples) pending_.push_back(clip_sample(sample));
    std::string out;
    size_t at = 0;
    while (pending_.size() - at >= static_cast<size_t>(frame_size_)) {
      send_frame(pending_.data() + at, frame_size_, out);
      at += static_cast<size_t>(frame_size_);
    }
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(at));
    return out;
  }

  std::string finish() override {
    if (finished_) throw_error(ErrorCode::kInternal, "aac encoder: finish() called twice");
    finished_ = true;
    std::string out;
    if (!pending_.empty()) {
      // An encoder without small-last-frame support gets the last frame padded with silence.
      int count = static_cast<int>(pending_.size());
      if (!small_last_frame_) pending_.resize(static_cast<size_t>(frame_size_), 0.0f);
      send_frame(pending_.data(), small_last_frame_ ? count : frame_size_, out);
      pending_.clear();
    }
    if (int status = avcodec_send_frame(context_, nullptr); status < 0) {
      throw_error(ErrorCode::kInternal, "aac encoder: flushing failed: {}", av_error(status));
    }
    receive_packets(out);
    return out;
  }

 private:
  void release() {
    av_packet_free(&packet_);
    av_frame_free(&frame_);
    avcodec_free_context(&context_);
  }

  void send_frame(const float* samples, int count, std::string& out) {
    av_frame_unref(frame_);
    frame_->format = AV_SAMPLE_FMT_FLTP;
    frame_->sample_rate = sample_rate_;
    frame_->nb_samples = count;
    av_channel_layout_default(&frame_->ch_layout, 1);
    if (int status = av_frame_get_buffer(frame_, 0); status < 0) {
      throw_error(ErrorCode::kInternal, "aac encoder: allocating a frame failed: {}", av_error(status));
    }
    std::copy(samples, samples + count, reinterpret_cast<float*>(frame_->data[0]));
    frame_->pts = samples_sent_;
    samples_sent_ += count;
    if (int status = avcodec_send_frame(context_, frame_); status < 0) {
      throw_error(ErrorCode::kInternal, "aac encoder: encoding failed: {}", av_error(status));
    }
    receive_packets(out);
  }

  void receive_packets(std::string& out) {
    while (true) {
      int status = avcodec_receive_packet(context_, packet_);
      if (status == AVERROR(EAGAIN) || status == AVERROR_EOF) return;
      if (status < 0) throw_error(ErrorCode::kInternal, "aac encoder: encoding failed: {}", av_error(status));
      out += adts_header(sample_rate_, static_cast<size_t>(packet_->size));
      out.append(reinterpret_cast<const char*>(packet_->data), static_cast<size_t>(packet_->size));
      av_packet_unref(packet_);
    }
  }

  int sample_rate_;
  AVCodecContext* context_ = nullptr;
  AVFrame* frame_ = nullptr;
  AVPacket* packet_ = nullptr;
  int frame_size_ = 1024;
  bool small_last_frame_ = false;
  std::vector<float> pending_;  // samples short of a whole frame
  int64_t samples_sent_ = 0;
  bool finished_ = false;
};

}  // namespace

std::string adts_header(int sample_rate, size_t payload_bytes) {
  const int rate_index = adts_rate_index(sample_rate);
  const size_t length = payload_bytes + kAdtsHeaderBytes;
  if (length > kAdtsMaxFrameBytes) {
    throw_error(ErrorCode::kInvalidArgument, "aac encoder: a {}-byte frame does not fit ADTS's 13-bit frame length",
                payload_bytes);
  }
  constexpr int kObjectTypeLc = 2;  // stored as object type - 1
  constexpr int kChannelConfig = 1;
  std::string header(kAdtsHeaderBytes, '\0');
  header[0] = static_cast<char>(0xFF);
  header[1] = static_cast<char>(0xF1);  // sync, MPEG-4, layer 0, no CRC
  header[2] = static_cast<char>(((kObjectTypeLc - 1) << 6) | (rate_index << 2) | (kChannelConfig >> 2));
  header[3] = static_cast<char>(((kChannelConfig & 3) << 6) | static_cast<int>(length >> 11));
  header[4] = static_cast<char>((length >> 3) & 0xFF);
  header[5] = static_cast<char>(((length & 7) << 5) | 0x1F);  // buffer fullness 0x7FF: variable rate
  header[6] = static_cast<char>(0xFC);                        // one raw data block
  return header;
}

std::unique_ptr<AudioEncoder> make_aac_encoder(const AudioEncoderOptions& options) {
  return std::make_unique<AacEncoder>(options);
}

}  // namespace omni::media
