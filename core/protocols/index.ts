/** The protocol registry: the wire of each protocol, and its full codec where conversion is built. */
import type { ProtocolName } from '../config/types.js';
import type { ProtocolCodec, ProtocolWire } from './types.js';
import { chatWire } from './openai-chat/wire.js';
import { messagesWire } from './anthropic-messages/wire.js';
import { responsesWire } from './openai-responses/wire.js';
import { chatCodec } from './openai-chat/codec.js';
import { messagesCodec } from './anthropic-messages/codec.js';
import { responsesCodec } from './openai-responses/codec.js';

const WIRES: Record<ProtocolName, ProtocolWire> = {
  'openai-chat': chatWire,
  'anthropic-messages': messagesWire,
  'openai-responses': responsesWire,
};

export function wireFor(p: ProtocolName): ProtocolWire {
  return WIRES[p];
}

// Full codecs (conversion through the IR): core/protocols/<protocol>/codec.ts, listed here.
const CODECS = new Map<ProtocolName, ProtocolCodec>([
  ['openai-chat', chatCodec],
  ['anthropic-messages', messagesCodec],
  ['openai-responses', responsesCodec],
]);

export function codecFor(p: ProtocolName): ProtocolCodec | undefined {
  return CODECS.get(p);
}
