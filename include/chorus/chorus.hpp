// Everything a host app needs: #include <chorus/chorus.hpp>.
#pragma once
#include <chorus/config.hpp>
#include <chorus/peer.hpp>
#include <chorus/result.hpp>
#include <chorus/runtime.hpp>
#include <chorus/status.hpp>
#include <chorus/tensor.hpp>
