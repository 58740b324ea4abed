import { DURATION_PATTERN } from '../../core/units.js';

export interface ConverterOptions {
  /**
   * How long the output items of a converted Responses answer stay recallable by
   * `item_reference` (a duration; "0s" turns the recall off).
   */
  item_ttl: string;
}
export const converterSchema = {
  type: 'object',
  additionalProperties: false,
  properties: {
    item_ttl: {
      type: 'string',
      pattern: DURATION_PATTERN,
      default: '1h',
      description: 'How long the items of converted Responses answers can be referred to by item_reference (0s: never)',
    },
  },
} as const;
