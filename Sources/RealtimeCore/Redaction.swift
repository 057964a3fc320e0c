/// Removes credentials from text that may reach logs or error descriptions.
package enum Redaction {
    static let placeholder = "<redacted>"

    /// The query parameters of the protocols here, printed as they are (`EIO`, `transport`,
    /// `negotiateVersion`, Spreadbot's `since` cursor, the `_` cache-buster of polls...). Every other value is redacted: a parameter of the application's own
    /// cannot tell by its name whether it is a secret (`?t=...` may be a token), and the
    /// connection tokens of the protocols (SignalR's `id`, Engine.IO's `sid`) are secrets too.
    static let protocolParameters: Set<String> = ["eio", "transport", "b64", "negotiateversion", "clientprotocol", "connectiondata", "since", "_"]

    static func isSecret(queryName name: Substring) -> Bool {
        !protocolParameters.contains(name.lowercased())
    }

    /// A URL with its user info, its fragment and every query value but the protocols' own
    /// parameters (``protocolParameters``) replaced by `<redacted>`.
    package static func url(_ url: String) -> String {
        var text = Substring(url)
        var result = ""
        // user info: scheme://user:pass@host
        if let colon = text.firstIndex(of: ":"), text[colon...].hasPrefix("://") {
            let authorityStart = text.index(colon, offsetBy: 3)
            result += text[..<authorityStart]
            text = text[authorityStart...]
            let authorityEnd = text.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) ?? text.endIndex
            let authority = text[..<authorityEnd]
            if let at = authority.lastIndex(of: "@") {
                result += placeholder + "@" + authority[authority.index(after: at)...]
            } else {
                result += authority
            }
            text = text[authorityEnd...]
        }
        guard let question = text.firstIndex(of: "?") else { return result + text }
        result += text[...question]
        let queryAndFragment = text[text.index(after: question)...]
        let fragmentStart = queryAndFragment.firstIndex(of: "#") ?? queryAndFragment.endIndex
        let pairs = queryAndFragment[..<fragmentStart].split(separator: "&", omittingEmptySubsequences: false)
        result += pairs.map { pair in
            guard let eq = pair.firstIndex(of: "="), isSecret(queryName: pair[..<eq]) else { return String(pair) }
            return pair[..<eq] + "=" + placeholder
        }.joined(separator: "&")
        if fragmentStart < queryAndFragment.endIndex { result += "#" + placeholder }
        return result
    }

    /// Describes an underlying error without letting a URL inside it leak a query string.
    package static func describe(_ error: any Error) -> String {
        let text = ErrorReasons.withoutSourcePaths(String(describing: error))
        guard text.contains("://") else { return text }
        return text.split(separator: " ", omittingEmptySubsequences: false).map { word in
            word.contains("://") ? url(String(word)) : String(word)
        }.joined(separator: " ")
    }
}
