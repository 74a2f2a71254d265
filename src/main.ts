#!/usr/bin/env node
import { runCli } from './cli/index.js';

await runCli(process.argv);
