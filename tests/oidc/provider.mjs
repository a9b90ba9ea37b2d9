// A real OpenID provider (panva/oidc-provider, certified) for memesh's console
// login tests. It listens on loopback only and is stopped by its test fixture.
//
// Usage: node provider.mjs <port>   (or OIDC_PORT=<port>)
// Environment:
//   OIDC_CLIENT_ID       default "memesh-console"
//   OIDC_CLIENT_SECRET   default "memesh-console-test-secret"
//   OIDC_REDIRECT_URIS   comma-separated; default http://127.0.0.1/admin/auth/callback
//
// The client is registered as a "native" application so a loopback redirect URI
// matches on any port (RFC 8252 section 7.3): each test server picks its port at
// start-up, after the provider is running. Scheme, host and path still have to
// match exactly, and PKCE is required for this client.
//
// Accounts: any login name becomes the subject (`sub`), any password is accepted
// (the provider's development interactions). Prints "ready <issuer>" once listening.
import { randomBytes } from 'node:crypto';
import http from 'node:http';

import Provider from 'oidc-provider';

const port = Number(process.argv[2] ?? process.env.OIDC_PORT);
if (!Number.isInteger(port) || port <= 0 || port > 65535) {
  console.error('usage: node provider.mjs <port>');
  process.exit(2);
}
const issuer = `http://127.0.0.1:${port}`;
const redirectUris = (process.env.OIDC_REDIRECT_URIS ?? 'http://127.0.0.1/admin/auth/callback')
  .split(',')
  .map((uri) => uri.trim())
  .filter(Boolean);

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: process.env.OIDC_CLIENT_ID ?? 'memesh-console',
      client_secret: process.env.OIDC_CLIENT_SECRET ?? 'memesh-console-test-secret',
      application_type: 'native',
      redirect_uris: redirectUris,
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
    },
  ],
  cookies: { keys: [randomBytes(32).toString('hex')] },
  pkce: { required: () => true },
  async findAccount(_ctx, id) {
    return {
      accountId: id,
      async claims() {
        return { sub: id };
      },
    };
  },
});

const server = http.createServer(provider.callback());
server.listen(port, '127.0.0.1', () => {
  console.log(`ready ${issuer}`);
});

function stop() {
  server.close(() => process.exit(0));
  setTimeout(() => process.exit(0), 2000).unref();
}
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
