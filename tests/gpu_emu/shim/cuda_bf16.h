#pragma once
#include "emu_device.h"
