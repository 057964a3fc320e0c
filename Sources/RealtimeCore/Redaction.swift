/// Removes credentials from text that may reach logs or error descriptions.
package enum Redaction {
    /// Query parameter names that are never printed even in redacted form (all query values are
    /// hidden anyway; this list is what the logger's metadata hides when it prints a query).
    static let placeholder = "<redacted>"

    /// A URL with its user info and every query value replaced by `<redacted>`.
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
            guard let eq = pair.firstIndex(of: "=") else { return String(pair) }
            return pair[..<eq] + "=" + placeholder
        }.joined(separator: "&")
        if fragmentStart < queryAndFragment.endIndex { result += "#" + placeholder }
        return result
    }

    /// Describes an underlying error without letting a URL inside it leak a query string.
    package static func describe(_ error: any Error) -> String {
        let text = String(describing: error)
        guard text.contains("://") else { return text }
        return text.split(separator: " ", omittingEmptySubsequences: false).map { word in
            word.contains("://") ? url(String(word)) : String(word)
        }.joined(separator: " ")
    }
}
