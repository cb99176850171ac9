#!/bin/bash
id -un > /workspace/whoami.txt
