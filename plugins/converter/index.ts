/**
 * converter: when an attempt's upstream speaks another protocol than the client (Chat on a
 * Messages-style group, Messages on a Responses-style group that allows it, Responses on a
 * Messages-style group, or a provider that lacks the client's protocol), it installs the IR hub
 * conversion for that pair. Without it in the chain, such requests get 503 "no available channels".
 * Mapping choices are documented in docs/conversion.md.
 */
import { definePlugin } from '../../core/plugin.js';
import { GatewayError } from '../../core/errors.js';
import { hubConversion } from '../../core/protocols/convert.js';
import { converterSchema, type ConverterOptions } from './schema.js';

export default definePlugin<ConverterOptions>({
  name: 'converter',
  description: 'Protocol conversion between Chat Completions, Messages and Responses',
  schema: converterSchema,
  create() {
    return {
      onAttempt(ctx, attempt) {
        const client = ctx.protocol;
        if (!client || attempt.upstreamProtocol === client) return;
        const conv = hubConversion(client, attempt.upstreamProtocol);
        if (!conv) {
          throw new GatewayError('NO_CHANNELS', { message: `No available channels: conversion from ${client} to ${attempt.upstreamProtocol} is not available` });
        }
        attempt.conversion = conv;
      },
    };
  },
});
