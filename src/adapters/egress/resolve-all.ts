/** The two questions of a resolver the proxy asks (node:dns/promises `Resolver` has both). */
export interface AddressResolver {
  resolve4(host: string): Promise<string[]>;
  resolve6(host: string): Promise<string[]>;
}

/**
 * Every address of `host`: its A records, then its AAAA records (issue 42: the proxy judges IPv6 answers by the same
 * closures, docs/spec.md §5.6), asked side by side. Fails only when neither question has an answer.
 */
export async function resolveAll(resolver: AddressResolver, host: string): Promise<string[]> {
  const [v4, v6] = await Promise.allSettled([resolver.resolve4(host), resolver.resolve6(host)]);
  const addresses = [
    ...(v4.status === 'fulfilled' ? v4.value : []),
    ...(v6.status === 'fulfilled' ? v6.value : []),
  ];
  if (addresses.length === 0 && v4.status === 'rejected') throw v4.reason;
  return addresses;
}
