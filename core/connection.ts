/**
 * How a client connection closes once the gateway answered before the request's body had all
 * arrived (a refused upload, a key refused before its body was read, a malformed request): in
 * stages, as RFC 9112 §9.6 asks. Closing at once would reset the connection while the client is
 * still sending (the kernel answers unread data with a reset), and a client that had not read the
 * answer yet — it is busy writing — loses it: EPIPE or ECONNRESET instead of its 413.
 *
 * So the gateway ends its side (FIN, after the answer), keeps reading and dropping what still
 * arrives, and closes for good when the client has nothing more to say: its own FIN, the request's
 * body complete, or LINGER_MS, whichever comes first. The bytes read meanwhile are bounded by the
 * caller where it counts them (body.ts: DISCARD_MAX) and by the time here.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Socket } from 'node:net';

/** How long a connection closing in stages keeps reading (and dropping) before it is closed anyway. */
export const LINGER_MS = 5_000;

const CLOSING = Symbol('closingInStages');
type Closing = Socket & { [CLOSING]?: true };

/** Whether the connection is closing in stages (its answer is given; what arrives is dropped). */
export function isClosing(socket: Socket): boolean {
  return (socket as Closing)[CLOSING] === true;
}

/**
 * Ends the gateway's side of `socket` once its answer is written, then drops what arrives until
 * the client's FIN, the end of `req`'s body, or LINGER_MS. A response still being written on the
 * socket is let finish first.
 */
export function closeInStages(socket: Socket, req?: IncomingMessage): void {
  if (isClosing(socket) || socket.destroyed) return;
  const pending = (socket as Socket & { _httpMessage?: { writableFinished: boolean; once(e: 'finish', f: () => void): void } })
    ._httpMessage;
  if (pending && !pending.writableFinished) return void pending.once('finish', () => closeInStages(socket, req));
  (socket as Closing)[CLOSING] = true;
  const done = () => socket.destroy();
  const timer = setTimeout(done, LINGER_MS);
  timer.unref();
  socket.once('close', () => clearTimeout(timer));
  // The client's FIN: it sent all it will (the socket allows half-open connections, so it would
  // otherwise stay open on our side).
  socket.once('end', done);
  if (req && !req.complete) req.once('end', done);
  else if (req) return void socket.end(done);
  socket.end();
}

const LAST = Symbol('lastExchange');
type Conn = Socket & { [LAST]?: ServerResponse };

/** Notes the latest request read on its connection, by its response (`res.req` is the request). */
export function noteExchange(res: ServerResponse): void {
  (res.req.socket as Conn)[LAST] = res;
}

/** The response to the latest request read on `socket`, if any. */
export function lastExchange(socket: Socket): ServerResponse | undefined {
  return (socket as Conn)[LAST];
}

/**
 * Node calls `destroySoon` after the last response on a connection (the client asked to close, or
 * the gateway answered `Connection: close`), and it destroys the socket as soon as the answer is
 * written. While that request's body is still arriving, this closes in stages instead.
 */
function destroySoonInStages(this: Socket): void {
  const req = (this as Conn)[LAST]?.req;
  if (req && !req.complete) return closeInStages(this, req);
  Socket.prototype.destroySoon.call(this);
}

/** Installs the staged close on a client socket (once, when it connects). */
export function lingerOnClose(socket: Socket): void {
  socket.destroySoon = destroySoonInStages;
}
