import NIOCore
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// How connections reach their servers: directly, through one proxy, or as the environment says.
///
/// Every transport follows it: WebSocket upgrades, SSE streams, long polls, POSTs, SignalR's
/// negotiate, Spreadbot's REST calls and token refreshes. Set it on a ``RealtimeRuntime``
/// (``RealtimeRuntime/proxy``); a client given a copy of the runtime with another proxy uses that
/// one, and the copy still shares the event loops and connection pools.
///
/// - An HTTP proxy is used as curl uses one. A plain `http://` request (an SSE stream, a long
///   poll, a POST, SignalR's negotiate, Spreadbot's REST calls) goes to the proxy in absolute-form,
///   `GET http://host:port/path HTTP/1.1`, for the proxy to forward: no tunnel, so a proxy that
///   allows `CONNECT` to port 443 only (squid's stock rules) passes it. `ws://` (a WebSocket
///   upgrade needs a tunnel, as with curl's `--proxytunnel`), `wss://` and `https://` go through a
///   `CONNECT` tunnel; TLS to the server runs inside it, with every ``TLSOptions`` rule: SNI, trust
///   roots, pins, client certificates. Credentials in the proxy URL are sent as
///   `Proxy-Authorization: Basic`, on the `CONNECT` or on each forwarded request.
/// - A SOCKS5 proxy tunnels every connection; the proxy resolves the server's name (curl's
///   `socks5h://`). Only SOCKS5 without authentication is supported.
/// - ``environment`` (the default) reads `https_proxy`, `http_proxy`, `all_proxy` and `no_proxy`,
///   lower case first, then upper case, when first used, as curl does: `wss://` and `https://` use
///   `https_proxy`, `ws://` and `http://` use `http_proxy`, either falls back to `all_proxy`.
///   `http_proxy` is read in lower case only: a server-side program may be handed a request's
///   `Proxy:` header as `HTTP_PROXY` (the "httpoxy" problem), so curl ignores the upper-case name.
///
/// Hosts in ``noProxy`` are reached directly; with ``environment``, so are those in `no_proxy`
/// (`NO_PROXY` when `no_proxy` is unset or empty), unless ``noProxy`` is set, which replaces it as
/// curl's `--noproxy` does. The rules are curl's (checked against curl 7.88 by a test):
/// - Entries are separated by commas, spaces and tabs; empty ones are skipped; case is ignored.
/// - `*` matches every host only as the whole list (`no_proxy=*`, `["*"]`); with other entries or
///   blanks around it, it matches nothing. There are no wildcards (`*.example.com` matches nothing).
/// - A host name matches an entry equal to it or to one of its parent domains (`example.com`
///   matches `example.com` and `api.example.com`, not `notexample.com`), after one trailing dot is
///   taken off the host and one leading and one trailing dot off the entry (`.example.com` and
///   `example.com.` are `example.com`; `..example.com` matches nothing).
/// - An IP address matches only an address of its family: equal to it, or a CIDR range
///   `address/bits` holding it; never a name's tail (`0.0.1` does not match `127.0.0.1`). The bits
///   are read as C's `atoi` reads them, as curl does: `/0` (or `/abc`) and all of the address's bits
///   compare the whole address, more bits than it has never match. IPv6 addresses may be in
///   brackets. (curl 7.88 compares an IPv6 host with the entries as text, so ranges such as
///   `fd00::/8` never match there; here they match as IPv4 ranges do.)
/// - Names are not resolved to match addresses (`localhost` does not match `127.0.0.1`).
///
/// As in curl, a proxy URL without a port uses 1080, and one without a scheme is an HTTP proxy.
///
/// A proxy that refuses a tunnel (a 407 for missing or wrong credentials, a 403, a 502) or closes
/// before opening it fails the connection with ``RealtimeError/Code/proxyFailed``, its status in
/// ``RealtimeError/status``; so does a 407 to a forwarded `http://` request. Any other answer to a
/// forwarded request is the server's as the proxy passed it on (a proxy's own 403 or 502 cannot be
/// told from the server's, as with curl). A proxy that cannot be reached fails with
/// ``RealtimeError/Code/connectFailed``. Both name the proxy (never its credentials), and the
/// client's reconnect rules apply as to any failed connection.
public struct ProxyConfiguration: Sendable, Hashable, CustomStringConvertible {
    enum Base: Sendable, Hashable {
        case direct
        case server(ProxyServer)
        case environment(ProxyEnvironment?)
    }
    let base: Base
    /// Hosts reached directly, by the rules above (`--noproxy` in curl: when not empty, it replaces
    /// the environment's `no_proxy`). Default: none.
    public var noProxy: [String]

    init(base: Base, noProxy: [String] = []) {
        self.base = base
        self.noProxy = noProxy
    }

    /// No proxy: every connection goes straight to its server.
    public static let none = ProxyConfiguration(base: .direct)

    /// The process's environment (`https_proxy`, `all_proxy` and `no_proxy` in either case,
    /// `http_proxy` in lower case only, as curl reads them), read once, when a connection first
    /// needs it. The default of every runtime.
    public static let environment = ProxyConfiguration(base: .environment(nil))

    /// Proxy settings read from these variables instead of the process's environment (the same
    /// names and rules as ``environment``).
    public static func environment(_ variables: [String: String]) -> ProxyConfiguration {
        ProxyConfiguration(base: .environment(ProxyEnvironment(variables)))
    }

    /// An HTTP proxy; `username` and `password`, when given, are sent as Basic credentials.
    public static func http(host: String, port: Int, username: String? = nil, password: String? = nil) -> ProxyConfiguration {
        ProxyConfiguration(base: .server(ProxyServer(kind: .http, host: host, port: port, username: username, password: password)))
    }

    /// A SOCKS5 proxy (no authentication; the proxy resolves names).
    public static func socks5(host: String, port: Int) -> ProxyConfiguration {
        ProxyConfiguration(base: .server(ProxyServer(kind: .socks5, host: host, port: port, username: nil, password: nil)))
    }

    /// A proxy given as a URL, as curl's `--proxy` takes it: `http://[user:password@]host[:port]`,
    /// `socks5://host[:port]` or `socks5h://host[:port]`; without a scheme, HTTP; without a port,
    /// 1080. An empty text means no proxy.
    /// - Throws: ``RealtimeError/Code/invalidURL`` for a URL that names no host, or a scheme this
    ///   package cannot speak (`https://` proxies, SOCKS4, SOCKS5 with credentials).
    public static func url(_ text: String) throws -> ProxyConfiguration {
        guard let server = try ProxyServer(url: text) else { return .none }
        return ProxyConfiguration(base: .server(server))
    }

    /// The proxy for a connection to `host` over `scheme` (`ws`, `wss`, `http` or `https`), or nil
    /// for a direct connection.
    /// - Throws: ``RealtimeError/Code/invalidURL`` when an environment variable holds a proxy URL
    ///   that cannot be used (a connection must not silently bypass the proxy it names).
    public func server(forScheme scheme: String, host: String) throws -> ProxyServer? {
        let secure = scheme == "wss" || scheme == "https"
        switch base {
        case .direct:
            return nil
        case .server(let server):
            return NoProxyRules.matches(host: host, entries: noProxy) ? nil : server
        case .environment(let variables):
            let environment = variables ?? ProxyEnvironment.process
            // As curl's --noproxy: a list of its own replaces the environment's.
            if NoProxyRules.matches(host: host, entries: noProxy.isEmpty ? environment.noProxy : noProxy) { return nil }
            return try environment.server(secure: secure)
        }
    }

    func server(for endpoint: Endpoint) throws -> ProxyServer? {
        try server(forScheme: endpoint.scheme, host: endpoint.host)
    }

    /// A readable summary without credentials.
    public var description: String {
        let bypass = noProxy.isEmpty ? "" : " (not for \(noProxy.joined(separator: ",")))"
        switch base {
        case .direct: return "no proxy"
        case .server(let server): return server.description + bypass
        case .environment: return "the environment's proxy" + bypass
        }
    }
}

/// One proxy server: its kind, address and credentials.
public struct ProxyServer: Sendable, Hashable, CustomStringConvertible {
    /// The proxy protocol.
    public enum Kind: String, Sendable, Hashable {
        /// HTTP: absolute-form requests for `http://`, `CONNECT` tunnels for the rest.
        case http
        /// SOCKS5, without authentication.
        case socks5
    }
    /// The proxy protocol.
    public var kind: Kind
    /// The proxy's host name or IP address.
    public var host: String
    /// The proxy's port.
    public var port: Int
    /// The user name for Basic credentials (HTTP proxies).
    public var username: String?
    /// The password for Basic credentials. Never printed.
    public var password: String?

    /// Makes a proxy server; every parameter is the property of the same name.
    public init(kind: Kind, host: String, port: Int, username: String? = nil, password: String? = nil) {
        self.kind = kind
        self.host = host
        self.port = port
        self.username = username
        self.password = password
    }

    /// Parses a proxy URL (see ``ProxyConfiguration/url(_:)``); nil for an empty text.
    init?(url text: String, variable: String? = nil) throws {
        let trimmed = String(Substring(text).trimmingSpaces())
        guard !trimmed.isEmpty else { return nil }
        let withScheme = trimmed.contains("://") ? trimmed : "http://" + trimmed
        let origin = variable.map { "the \($0) environment variable" } ?? "the proxy URL"
        func invalid(_ why: String) -> RealtimeError {
            RealtimeError(.invalidURL, "\(origin) \(Redaction.url(withScheme)) \(why)")
        }
        guard let components = URLComponents(string: withScheme), let scheme = components.scheme?.lowercased(),
            let host = components.host, !host.isEmpty
        else { throw invalid("names no proxy host") }
        let kind: Kind
        switch scheme {
        case "http": kind = .http
        case "socks5", "socks5h": kind = .socks5
        case "https": throw invalid("is an HTTPS proxy; only HTTP and SOCKS5 proxies are supported")
        default: throw invalid("has the scheme \(scheme); only http://, socks5:// and socks5h:// proxies are supported")
        }
        let username = components.user.flatMap { $0.isEmpty ? nil : $0 }
        if kind == .socks5, username != nil {
            throw invalid("carries credentials; SOCKS5 authentication is not supported")
        }
        self.init(
            kind: kind, host: host.hasPrefix("[") ? String(host.dropFirst().dropLast()) : host, port: components.port ?? 1080,
            username: username, password: components.password)
    }

    /// `Proxy-Authorization` for an HTTP proxy with credentials.
    var basicAuthorization: String? {
        guard let username else { return nil }
        return "Basic " + Data("\(username):\(password ?? "")".utf8).base64EncodedString()
    }

    /// The proxy's URL without credentials, for messages.
    public var description: String {
        let hostPart = host.contains(":") ? "[\(host)]" : host
        return "\(kind.rawValue)://\(hostPart):\(port)"
    }
}

/// The proxy variables of an environment, parsed.
struct ProxyEnvironment: Sendable, Hashable {
    /// The value and the variable it came from, for each role.
    var https: (name: String, value: String)?
    var http: (name: String, value: String)?
    var all: (name: String, value: String)?
    var noProxy: [String]

    init(_ variables: [String: String]) {
        func pick(_ name: String, upperCase: Bool = true) -> (name: String, value: String)? {
            for candidate in upperCase ? [name.lowercased(), name.uppercased()] : [name.lowercased()] {
                if let value = variables[candidate], !value.isEmpty { return (candidate, value) }
            }
            return nil
        }
        https = pick("https_proxy")
        // curl ignores HTTP_PROXY: a CGI program gets a request's `Proxy:` header under that name.
        http = pick("http_proxy", upperCase: false)
        all = pick("all_proxy")
        noProxy = NoProxyRules.entries(pick("no_proxy")?.value ?? "")
    }

    /// The process's environment, read once.
    static let process = ProxyEnvironment(ProcessInfo.processInfo.environment)

    func server(secure: Bool) throws -> ProxyServer? {
        guard let (name, value) = (secure ? https : http) ?? all else { return nil }
        return try ProxyServer(url: value, variable: name)
    }

    static func == (lhs: ProxyEnvironment, rhs: ProxyEnvironment) -> Bool {
        lhs.https?.value == rhs.https?.value && lhs.http?.value == rhs.http?.value && lhs.all?.value == rhs.all?.value
            && lhs.noProxy == rhs.noProxy
    }

    func hash(into hasher: inout Hasher) {
        hasher.combine(https?.value)
        hasher.combine(http?.value)
        hasher.combine(all?.value)
        hasher.combine(noProxy)
    }
}

/// curl's `no_proxy` rules (as curl 7.88 applies them; see ``ProxyConfiguration``).
package enum NoProxyRules {
    /// The entries of a `no_proxy` text: separated by commas, spaces or tabs, lower case, empty
    /// ones dropped. `*` matches every host only as the whole text (`["*"]`); among other entries,
    /// or with blanks around it, it matches none and is dropped.
    package static func entries(_ text: String) -> [String] {
        guard text != "*" else { return ["*"] }
        return text.split(whereSeparator: { $0 == "," || $0 == " " || $0 == "\t" }).map { $0.lowercased() }.filter { $0 != "*" }
    }

    /// Whether `host` is reached directly.
    package static func matches(host: String, entries: [String]) -> Bool {
        guard !entries.isEmpty else { return false }
        // Only as the whole list: "*" among other entries is a name like any other (matching none).
        if entries == ["*"] { return true }
        var name = host.lowercased()
        if name.hasPrefix("[") && name.hasSuffix("]") { name = String(name.dropFirst().dropLast()) }
        if let address = IPAddressBytes(name) {
            // An IP literal matches an address or a CIDR range of its family, never a name's tail.
            return entries.contains { entry in matches(address: address, entry: entry) }
        }
        // One trailing dot of the host and one leading and one trailing dot of an entry are ignored.
        if name.hasSuffix(".") { name.removeLast() }
        for entry in entries {
            var pattern = Substring(entry)
            if pattern.hasSuffix(".") { pattern = pattern.dropLast() }
            if pattern.hasPrefix(".") { pattern = pattern.dropFirst() }
            guard !pattern.isEmpty else { continue }
            if name == pattern || name.hasSuffix("." + pattern) { return true }
        }
        return false
    }

    /// An IP literal against one entry: `address`, `address/bits` (curl reads the bits as C's
    /// `atoi` does; 0, or all of the address's bits, compares the whole address; more never
    /// matches), IPv6 ones in brackets or not.
    private static func matches(address: IPAddressBytes, entry: String) -> Bool {
        var pattern = Substring(entry)
        var bits = 0
        if let slash = pattern.firstIndex(of: "/") {
            bits = atoi(pattern[pattern.index(after: slash)...])
            pattern = pattern[..<slash]
        }
        if pattern.hasPrefix("[") && pattern.hasSuffix("]") { pattern = pattern.dropFirst().dropLast() }
        guard let network = IPAddressBytes(String(pattern)), network.bytes.count == address.bytes.count else { return false }
        let width = address.bytes.count * 8
        if bits < 0 || bits > width { return false }
        if bits == 0 || bits == width { return address == network }
        return address.isIn(network: network, prefix: bits)
    }

    /// C's `atoi`: leading blanks, an optional sign, then digits up to the first other character.
    private static func atoi(_ text: Substring) -> Int {
        var rest = text.drop { $0 == " " || $0 == "\t" }
        var sign = 1
        if let first = rest.first, first == "-" || first == "+" {
            sign = first == "-" ? -1 : 1
            rest = rest.dropFirst()
        }
        var value = 0
        for character in rest {
            guard let digit = character.wholeNumberValue, character.isASCII else { break }
            value = min(value * 10 + digit, 1 << 32)
        }
        return sign * value
    }
}

/// An IPv4 or IPv6 address as bytes, for `no_proxy` matching.
struct IPAddressBytes: Equatable {
    let bytes: [UInt8]

    init?(_ text: String) {
        var v4 = [UInt8](repeating: 0, count: 4)
        if inet_pton(AF_INET, text, &v4) == 1 {
            bytes = v4
            return
        }
        var v6 = [UInt8](repeating: 0, count: 16)
        if inet_pton(AF_INET6, text, &v6) == 1 {
            bytes = v6
            return
        }
        return nil
    }

    func isIn(network: IPAddressBytes, prefix: Int) -> Bool {
        guard bytes.count == network.bytes.count, prefix >= 0, prefix <= bytes.count * 8 else { return false }
        var remaining = prefix
        for index in bytes.indices where remaining > 0 {
            let take = min(8, remaining)
            let mask = UInt8(truncatingIfNeeded: 0xFF << (8 - take))
            if bytes[index] & mask != network.bytes[index] & mask { return false }
            remaining -= take
        }
        return true
    }
}
