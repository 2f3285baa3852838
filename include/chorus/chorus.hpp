// Everything a host app needs: #include <chorus/chorus.hpp>. No CAF header: host apps that are CAF
// actors add <chorus/caf.hpp> (and link chorus::caf).
#pragma once
#include <chorus/config.hpp>
#include <chorus/grad_sync.hpp>
#include <chorus/peer.hpp>
#include <chorus/result.hpp>
#include <chorus/runtime.hpp>
#include <chorus/status.hpp>
#include <chorus/tensor.hpp>
#include <chorus/work.hpp>
