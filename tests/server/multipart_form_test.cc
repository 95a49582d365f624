// parse_multipart_form and multipart_boundary: parts with their names, file names, types and bytes;
// parameters read in order with quoted values, so a ';' or '=' inside quotes is part of the value;
// malformed bodies are clear errors.
#include "server/multipart_form.h"

#include <gtest/gtest.h>

#include <string>

#include "base/error.h"

namespace omni::server {
namespace {

TEST(MultipartForm, ReadsPartsWithTheirNamesFileNamesAndBytes) {
  using namespace std::string_literals;  // the body holds a NUL byte
  const std::string body =
      "preamble\r\n--b1\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\nalice\r\n"
      "--b1\r\ncontent-disposition: form-data; name=audio_sample; filename=\"a.wav\"\r\n"
      "Content-Type: audio/wav\r\n\r\nRIFF\0\r\nx\r\n--b1--\r\n"s;
  const std::vector<FormPart> parts = parse_multipart_form(body, "b1");
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].name, "name");
  EXPECT_EQ(parts[0].data, "alice");
  EXPECT_FALSE(parts[0].filename);
  EXPECT_EQ(parts[1].name, "audio_sample");
  EXPECT_EQ(parts[1].filename, "a.wav");
  EXPECT_EQ(parts[1].content_type, "audio/wav");
  EXPECT_EQ(parts[1].data, std::string("RIFF\0\r\nx", 8));
}

// Found in writing the multipart_form fuzzer's round trip: parameters were looked for at every ';',
// so a quoted name "x;filename=y" gave the part a file name `y"`.
TEST(MultipartForm, SemicolonsInsideQuotesBelongToTheValue) {
  const std::string body =
      "--q\r\nContent-Disposition: form-data; name=\"x;filename=y\"\r\n\r\nv\r\n"
      "--q\r\nContent-Disposition: form-data; name=\"k\"; filename=\"C:\\dir\\f \\\"q\\\".wav\"\r\n\r\nw\r\n--q--";
  const std::vector<FormPart> parts = parse_multipart_form(body, "q");
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].name, "x;filename=y");
  EXPECT_FALSE(parts[0].filename);
  EXPECT_EQ(parts[1].name, "k");
  EXPECT_EQ(parts[1].filename, "C:\\dir\\f \"q\".wav");  // \" is a quote; other backslashes are kept
  EXPECT_EQ(multipart_boundary("multipart/form-data; charset=\"a;boundary=no\"; boundary=\"yes;1\""), "yes;1");
  EXPECT_EQ(multipart_boundary("Multipart/Form-Data;boundary=plain ; x=1"), "plain");
  EXPECT_EQ(multipart_boundary("application/json"), std::nullopt);
}

TEST(MultipartForm, MalformedBodiesAreClearErrors) {
  auto message = [](std::string_view body) {
    try {
      parse_multipart_form(body, "b");
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message("no delimiter"), "the multipart body does not contain its boundary");
  EXPECT_EQ(message("--bX"), "malformed multipart delimiter line");
  EXPECT_EQ(message("--b\r\nContent-Disposition: form-data; name=a\r\n"), "a multipart part has no end of its headers");
  EXPECT_EQ(message("--b\r\nContent-Type: text/plain\r\n\r\nx\r\n--b--"),
            "a multipart part has no Content-Disposition name");
  EXPECT_EQ(message("--b\r\nContent-Disposition: form-data; name=a\r\n\r\nx"),
            "the multipart body ends without its closing boundary");
  EXPECT_THROW(multipart_boundary("multipart/form-data; boundary=\"\""), Error);
  EXPECT_THROW(multipart_boundary("multipart/form-data; charset=utf-8"), Error);
}

}  // namespace
}  // namespace omni::server
