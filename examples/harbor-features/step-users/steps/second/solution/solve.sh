#!/bin/bash
id -un > /workspace/second.txt
