#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A parsed server address: scheme, host, port and the path with its query.
package struct Endpoint: Sendable, Equatable {
    package var scheme: String
    package var host: String
    package var port: Int
    /// Path and query, starting with `/`.
    package var pathAndQuery: String

    package var isSecure: Bool { scheme == "wss" || scheme == "https" }

    package init(_ text: String, allowedSchemes: Set<String>) throws {
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), allowedSchemes.contains(scheme),
            let host = url.host, !host.isEmpty
        else { throw RealtimeError.invalidURL(text) }
        self.scheme = scheme
        self.host = host
        let secure = scheme == "wss" || scheme == "https"
        self.port = url.port ?? (secure ? 443 : 80)
        // URL.path drops a trailing slash ("/socket.io/" -> "/socket.io"), which servers route
        // differently: take the path as written.
        let components = URLComponents(url: url, resolvingAgainstBaseURL: false)
        var path = components?.percentEncodedPath ?? url.path
        if path.isEmpty { path = "/" }
        if let query = components?.percentEncodedQuery ?? url.query { path += "?" + query }
        self.pathAndQuery = path
    }
}
