// Everything a host app needs: #include "actors/chorus.hpp".
#pragma once
#include "actors/config.hpp"
#include "actors/peer.hpp"
#include "actors/result.hpp"
#include "actors/runtime.hpp"
#include "actors/status.hpp"
#include "actors/tensor.hpp"
