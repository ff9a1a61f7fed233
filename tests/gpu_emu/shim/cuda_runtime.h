#pragma once
#include "cuda_runtime_api.h"
#include "emu_device.h"
