#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import NIOConcurrencyHelpers
package import NIOHTTP1

/// An opt-in cookie jar shared by the HTTP and WebSocket transports (RFC 6265, the parts a client
/// of one backend needs).
///
/// Give the same store to every request and upgrade of one client: it takes `Set-Cookie` from HTTP
/// responses and WebSocket upgrade responses (refused ones too) and sends the matching cookies on
/// later requests and upgrades. Load balancers with sticky sessions need this for Socket.IO's
/// polling-then-upgrade and for SignalR's negotiate-then-connect.
///
/// Rules applied: host-only cookies unless `Domain` is given (and the domain must cover the host
/// that set it; IP addresses match only themselves); `Path` prefix matching with the RFC's default
/// path; `Secure` cookies only over https/wss; `Max-Age` before `Expires`; an expired or
/// `Max-Age=0` cookie removes the stored one. Not applied: the public suffix list, `SameSite`
/// (no browsing context here), `HttpOnly` (no scripts here). At most ``capacity`` cookies are kept
/// (the oldest go first), each at most 4096 bytes, so a server cannot grow the store without bound.
///
/// Cookie values are credentials: they never appear in logs or error descriptions.
public final class CookieStore: Sendable {
    struct Cookie: Sendable, Equatable {
        var name: String
        var value: String
        var domain: String
        var hostOnly: Bool
        var path: String
        var secure: Bool
        var expires: Date?
        var created: Int
    }

    private struct State {
        var cookies: [Cookie] = []
        var counter = 0
    }

    private let state = NIOLockedValueBox(State())
    /// The most cookies kept at once.
    public let capacity: Int
    private let now: @Sendable () -> Date

    /// Makes an empty store that keeps at most `capacity` cookies (the oldest go first).
    public init(capacity: Int = 300) {
        self.capacity = capacity
        self.now = { Date() }
    }

    init(capacity: Int = 300, now: @escaping @Sendable () -> Date) {
        self.capacity = capacity
        self.now = now
    }

    /// How many unexpired cookies the store holds.
    public var count: Int {
        let now = now()
        return state.withLockedValue { $0.cookies.filter { $0.expires.map { $0 > now } ?? true }.count }
    }

    /// Removes every cookie.
    public func removeAll() {
        state.withLockedValue { $0.cookies.removeAll() }
    }

    /// The `Cookie` header value for a request to `url`, or nil when no cookie matches.
    public func cookieHeader(for url: String) -> String? {
        guard let target = Target(url) else { return nil }
        let now = now()
        let matching = state.withLockedValue { state -> [Cookie] in
            state.cookies.removeAll { $0.expires.map { $0 <= now } ?? false }
            return state.cookies.filter { cookie in
                (!cookie.secure || target.secure) && Self.domainMatches(cookie, host: target.host)
                    && Self.pathMatches(target.path, cookiePath: cookie.path)
            }
        }
        guard !matching.isEmpty else { return nil }
        // Longer paths first, then older cookies first (RFC 6265 section 5.4).
        let ordered = matching.sorted { $0.path.count != $1.path.count ? $0.path.count > $1.path.count : $0.created < $1.created }
        return ordered.map { "\($0.name)=\($0.value)" }.joined(separator: "; ")
    }

    /// Stores the cookies of `Set-Cookie` header values received from `url`.
    public func store(setCookie values: [String], from url: String) {
        guard !values.isEmpty, let target = Target(url) else { return }
        let now = now()
        let parsed = values.compactMap { Self.parse($0, target: target, now: now) }
        guard !parsed.isEmpty else { return }
        state.withLockedValue { state in
            for var cookie in parsed {
                let existing = state.cookies.firstIndex {
                    $0.name == cookie.name && $0.domain == cookie.domain && $0.path == cookie.path
                }
                if let existing {
                    cookie.created = state.cookies[existing].created
                    state.cookies.remove(at: existing)
                } else {
                    state.counter += 1
                    cookie.created = state.counter
                }
                if let expires = cookie.expires, expires <= now { continue }
                state.cookies.append(cookie)
            }
            if state.cookies.count > capacity {
                state.cookies.sort { $0.created < $1.created }
                state.cookies.removeFirst(state.cookies.count - capacity)
            }
        }
    }

    /// Adds the matching cookies to `headers` (next to a `Cookie` header the caller set itself).
    package func apply(to headers: inout HTTPHeaders, url: String) {
        guard let value = cookieHeader(for: url) else { return }
        if let own = headers.first(name: "cookie"), !own.isEmpty {
            headers.replaceOrAdd(name: "Cookie", value: own + "; " + value)
        } else {
            headers.replaceOrAdd(name: "Cookie", value: value)
        }
    }

    /// Takes the `Set-Cookie` headers of a response from `url`.
    package func record(_ headers: HTTPHeaders, from url: String) {
        store(setCookie: headers[canonicalForm: "set-cookie"].map(String.init), from: url)
    }

    // MARK: Rules

    struct Target {
        var host: String
        var path: String
        var secure: Bool

        init?(_ url: String) {
            guard let endpoint = try? Endpoint(url, allowedSchemes: ["http", "https", "ws", "wss"]) else { return nil }
            host = endpoint.host.lowercased()
            secure = endpoint.isSecure
            let pathOnly = endpoint.pathAndQuery.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first
            path = pathOnly.map(String.init) ?? "/"
            if path.isEmpty { path = "/" }
        }

        /// RFC 6265 section 5.1.4.
        var defaultPath: String {
            guard path.hasPrefix("/"), let lastSlash = path.lastIndex(of: "/"), lastSlash != path.startIndex else { return "/" }
            return String(path[..<lastSlash])
        }
    }

    static func domainMatches(_ cookie: Cookie, host: String) -> Bool {
        if host == cookie.domain { return true }
        if cookie.hostOnly || isIPAddress(host) { return false }
        return host.hasSuffix("." + cookie.domain)
    }

    static func pathMatches(_ requestPath: String, cookiePath: String) -> Bool {
        if requestPath == cookiePath { return true }
        guard requestPath.hasPrefix(cookiePath) else { return false }
        return cookiePath.hasSuffix("/") || requestPath.dropFirst(cookiePath.count).first == "/"
    }

    static func isIPAddress(_ host: String) -> Bool {
        host.contains(":") || (!host.isEmpty && host.allSatisfy { $0.isNumber || $0 == "." })
    }

    static func parse(_ header: String, target: Target, now: Date) -> Cookie? {
        guard header.utf8.count <= 4096 else { return nil }
        var parts = header.split(separator: ";", omittingEmptySubsequences: false).makeIterator()
        guard let pair = parts.next(), let equals = pair.firstIndex(of: "=") else { return nil }
        let name = pair[..<equals].trimmingSpaces()
        var value = pair[pair.index(after: equals)...].trimmingSpaces()
        if value.count >= 2, value.first == "\"", value.last == "\"" { value = value.dropFirst().dropLast() }
        guard !name.isEmpty else { return nil }
        var cookie = Cookie(
            name: String(name), value: String(value), domain: target.host, hostOnly: true, path: target.defaultPath,
            secure: false, expires: nil, created: 0)
        var maxAgeSeen = false
        while let attribute = parts.next() {
            let (key, argument): (Substring, Substring)
            if let equals = attribute.firstIndex(of: "=") {
                key = attribute[..<equals].trimmingSpaces()
                argument = attribute[attribute.index(after: equals)...].trimmingSpaces()
            } else {
                key = attribute.trimmingSpaces()
                argument = ""
            }
            switch key.lowercased() {
            case "domain":
                var domain = argument.lowercased()
                if domain.hasPrefix(".") { domain.removeFirst() }
                guard !domain.isEmpty else { continue }
                // The domain must cover the host that set it; an IP address covers only itself.
                guard target.host == domain || (!isIPAddress(target.host) && target.host.hasSuffix("." + domain)) else {
                    return nil
                }
                cookie.domain = domain
                cookie.hostOnly = false
            case "path":
                cookie.path = argument.hasPrefix("/") ? String(argument) : target.defaultPath
            case "secure":
                cookie.secure = true
            case "max-age":
                guard let seconds = Int(argument) else { continue }
                maxAgeSeen = true
                cookie.expires = seconds <= 0 ? Date.distantPast : now.addingTimeInterval(TimeInterval(min(seconds, 400 * 86_400)))
            case "expires":
                guard !maxAgeSeen, let date = HTTPDate.parse(String(argument)) else { continue }
                cookie.expires = date
            default:
                continue
            }
        }
        // A secure cookie may only be set over a secure connection (RFC 6265bis).
        if cookie.secure && !target.secure { return nil }
        return cookie
    }
}

/// Parses the HTTP date format cookies use ("Wed, 21 Oct 2026 07:28:00 GMT", also with dashes).
enum HTTPDate {
    static func parse(_ text: String) -> Date? {
        let months = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
        var day: Int?, month: Int?, year: Int?, time: (Int, Int, Int)?
        for token in text.split(whereSeparator: { " ,-".contains($0) }) {
            if time == nil, token.contains(":") {
                let pieces = token.split(separator: ":").compactMap { Int($0) }
                if pieces.count == 3 { time = (pieces[0], pieces[1], pieces[2]) }
            } else if let number = Int(token) {
                if day == nil, token.count <= 2 { day = number } else if year == nil { year = number < 100 ? number + (number < 70 ? 2000 : 1900) : number }
            } else if month == nil, let index = months.firstIndex(of: String(token.prefix(3)).lowercased()) {
                month = index + 1
            }
        }
        guard let day, let month, let year, let time, (1...31).contains(day), time.0 < 24, time.1 < 60, time.2 < 61 else { return nil }
        // Days since 1970-01-01 (civil-from-days inverse, proleptic Gregorian).
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        let days = era * 146_097 + dayOfEra - 719_468
        let seconds = days * 86_400 + time.0 * 3600 + time.1 * 60 + time.2
        return Date(timeIntervalSince1970: TimeInterval(seconds))
    }
}
