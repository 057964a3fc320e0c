// A view controller in the style of SwiftSignalRClient's example app: it owns the connection, opens
// it in viewDidLoad, streams prices with a StreamHandle it cancels on disappear, reads handler
// arguments with ArgumentExtractor, and hops to the main queue where it must.
import Foundation
import SignalRClient

// Stand-ins for the app's UIKit types.
class UIViewController {
    func viewDidLoad() {}
    func viewWillDisappear(_ animated: Bool) {}
}
final class UILabel { var text: String? }
final class UITableView { func reloadData() {} }

struct Stock: Decodable {
    let symbol: String
    let price: Double
}

final class StockTickerViewController: UIViewController, HubConnectionDelegate {
    private var hubConnection: HubConnection?
    private var streamHandle: StreamHandle?
    private var stocks: [String: Double] = [:]
    let statusLabel = UILabel()
    let tableView = UITableView()

    override func viewDidLoad() {
        super.viewDidLoad()
        hubConnection = HubConnectionBuilder(url: URL(string: "https://example.com/stocks")!)
            .withHubConnectionDelegate(delegate: self)
            .withAutoReconnect(reconnectPolicy: InfiniteReconnectPolicy(retryIntervals: [.seconds(1), .seconds(5)]))
            .withHubConnectionOptions { options in
                options.keepAliveInterval = 10
            }
            .build()
        hubConnection?.on(method: "MarketOpened", callback: { argumentExtractor in
            let when = try argumentExtractor.getArgument(type: String.self)
            var note = ""
            if argumentExtractor.hasMoreArgs() {
                note = try argumentExtractor.getArgument(type: String.self)
            }
            self.statusLabel.text = "open since \(when) \(note)"
        })
        hubConnection?.start()
    }

    override func viewWillDisappear(_ animated: Bool) {
        super.viewWillDisappear(animated)
        if let handle = streamHandle {
            hubConnection?.cancelStreamInvocation(streamHandle: handle) { error in
                print("cancel failed: \(error)")
            }
        }
        hubConnection?.stop()
    }

    private func startStreaming() {
        streamHandle = hubConnection?.stream(method: "StreamStocks", streamItemReceived: { (stock: Stock) in
            self.stocks[stock.symbol] = stock.price
            self.tableView.reloadData()
        }, invocationDidComplete: { [weak self] error in
            DispatchQueue.main.async {
                self?.statusLabel.text = error == nil ? "stream ended" : "stream failed: \(error!)"
            }
        })
    }

    func connectionDidOpen(hubConnection: HubConnection) {
        statusLabel.text = "connected"
        startStreaming()
    }

    func connectionDidFailToOpen(error: Error) {
        DispatchQueue.main.async { self.statusLabel.text = "failed: \(error.localizedDescription)" }
    }

    func connectionDidClose(error: Error?) {
        statusLabel.text = "closed"
    }

    func connectionWillReconnect(error: Error) {
        statusLabel.text = "reconnecting…"
    }

    func connectionDidReconnect() {
        statusLabel.text = "connected"
        startStreaming()
    }
}
