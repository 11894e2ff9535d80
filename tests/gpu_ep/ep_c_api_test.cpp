// The EP C ABI (moefuse_ep.h): bad arguments come back as MOEFUSE_STATUS_INVALID_ARGUMENT with a
// message naming the argument, before any NCCL or CUDA call, so these run without a GPU. Its GPU
// path runs under python/tests/test_ep_torch.py (two ranks over torch.distributed).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "moefuse/moefuse.h"
#include "moefuse/moefuse_ep.h"

namespace {

void expect_names(moefuse_status_t status, const std::string& argument) {
  EXPECT_EQ(status, MOEFUSE_STATUS_INVALID_ARGUMENT);
  const std::string message = moefuse_last_error();
  EXPECT_NE(message.find(argument), std::string::npos) << message;
}

TEST(EpCApi, BadArgumentsAreNamed) {
  moefuse_config_t config{};
  ASSERT_EQ(moefuse_config_preset("qwen3-30b-a3b", &config), MOEFUSE_STATUS_OK);
  const uint8_t id[MOEFUSE_EP_UNIQUE_ID_BYTES] = {};
  const moefuse_ep_options_t options{.max_tokens_per_rank = 64, .receive_capacity_rows = 0,
                                     .chunks = 1, .transfer_sms = 16};
  moefuse_ep_layer_t* layer = nullptr;
  expect_names(moefuse_ep_layer_create(nullptr, id, 2, 0, &options, &layer), "config");
  expect_names(moefuse_ep_layer_create(&config, nullptr, 2, 0, &options, &layer), "id");
  expect_names(moefuse_ep_layer_create(&config, id, 2, 0, nullptr, &layer), "options");
  expect_names(moefuse_ep_layer_create(&config, id, 0, 0, &options, &layer), "ranks");
  expect_names(moefuse_ep_layer_create(&config, id, 2, 2, &options, &layer), "rank");
  moefuse_config_t bad = config;
  bad.hidden = 0;
  expect_names(moefuse_ep_layer_create(&bad, id, 2, 0, &options, &layer), "hidden");
  EXPECT_EQ(layer, nullptr);
  expect_names(moefuse_ep_unique_id(nullptr), "id");
  expect_names(moefuse_ep_layer_forward(nullptr, 1, nullptr, nullptr, nullptr, nullptr, nullptr,
                                        0, nullptr, 0, nullptr),
               "layer");
  int32_t* flags = nullptr;
  expect_names(moefuse_ep_layer_transport_flags(nullptr, &flags), "layer");
  EXPECT_EQ(moefuse_ep_layer_destroy(nullptr), MOEFUSE_STATUS_OK);  // as delete of null
}

}  // namespace
